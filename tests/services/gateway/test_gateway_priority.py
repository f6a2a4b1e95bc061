"""A request's engine priority: its key's tier's, or its own `priority` at or behind it, in the plan it carries."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"


async def _planned(gw: Gateway, responder: Responder, key: str, route: str, **body: Any) -> int:
    """The priority in the plan of the work a request published."""
    n = len(responder.works)
    if route == "/v1/completions":
        payload = {"model": MODEL, "prompt": "hi", **body}
    else:
        payload = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(route, json=payload, headers=gw.auth(key))
    assert r.status_code == 200, r.text
    work = responder.works[n]
    assert work.plan is not None
    return work.plan.priority


async def test_the_tier_sets_the_priority(gw: Gateway, responder: Responder) -> None:
    tiers = gw.settings.tiers
    assert await _planned(gw, responder, gw.pro_key, "/v1/chat/completions") == tiers["pro"].priority == 0
    assert await _planned(gw, responder, gw.free_key, "/v1/chat/completions") == tiers["free"].priority == 10


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_a_request_may_put_itself_behind_its_tier(gw: Gateway, responder: Responder, route: str) -> None:
    assert await _planned(gw, responder, gw.free_key, route, priority=30) == 30
    assert await _planned(gw, responder, gw.pro_key, route, priority=10) == 10


@pytest.mark.parametrize(
    ("priority", "named"),
    [(0, "10 to 100"), (9, "10 to 100"), (101, "10 to 100"), ("1", "priority"), (2.5, "priority")],
)
async def test_a_priority_ahead_of_the_tier_or_not_an_integer_is_a_400(
    gw: Gateway, responder: Responder, priority: Any, named: str
) -> None:
    n = len(responder.works)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "priority": priority}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth(gw.free_key))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "bad_request" and named in err["message"], err
    assert len(responder.works) == n  # refused before anything is published
