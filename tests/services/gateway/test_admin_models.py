"""`/v1/admin/models` at the gateway, against a scripted supervisor (or none): the admin guard, a bad entry
refused before the supervisor is asked, the 503 of a deployment without a supervisor, a start that fails
(its log tail in the error) and one that succeeds; and `GET /v1/models` naming the embedding model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME, default_model_path
from switchyard.schemas import PoolReply, PoolStart, PoolStop, subjects
from switchyard.schemas.embeddings import EMBEDDING_MODEL
from tests.services.gateway.harness import Gateway

NEW = {"name": "smol-copy", "pool": "smolcopy", "path": default_model_path(), "aliases": ["smol-two"]}


@pytest.fixture
async def admin(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10, headers=gw.auth(gw.admin_key)) as c:
        yield c


async def supervisor(gw: Gateway, subject: str, model: Any, answer: Callable[[Any], Awaitable[PoolReply]]) -> Any:
    return await gw.bus.subscribe(subject, model, answer, queue="supervisor")


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert {"type", "code", "message"} <= set(err)
    return err


async def test_the_model_list_names_the_embedding_model_with_its_kind(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        listed = (await c.get("/v1/models")).json()["data"]
        one = (await c.get(f"/v1/models/{EMBEDDING_MODEL}")).json()
    kinds = {m["id"]: m["kind"] for m in listed}
    assert listed[0]["id"] == DEFAULT_MODEL_NAME and kinds[DEFAULT_MODEL_NAME] == "generation"
    assert kinds[EMBEDDING_MODEL] == "embedding" and one["dimensions"] == 384


async def test_only_the_admin_key_manages_models(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        assert (await c.get("/v1/admin/models")).status_code == 403
        assert (await c.post("/v1/admin/models", json=NEW)).status_code == 403
        assert (await c.delete("/v1/admin/models/gemma-3-270m")).status_code == 403


async def test_the_admin_list_says_each_entry_s_replicas(admin: httpx.AsyncClient) -> None:
    r = await admin.get("/v1/admin/models")
    assert r.status_code == 200
    entries = {e["card"]["name"]: e for e in r.json()["data"]}
    assert entries[DEFAULT_MODEL_NAME]["default"] and entries[DEFAULT_MODEL_NAME]["state"] in ("serving", "no_replica")
    assert entries["gemma-3-270m"]["card"]["pool"] == "gemma"


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({**NEW, "name": DEFAULT_MODEL_NAME}, "is already served"),
        ({**NEW, "aliases": ["smollm2"]}, "is already served"),
        ({**NEW, "pool": "gemma"}, "already serves a model"),
        ({**NEW, "pool": "a.b"}, "pool"),
        ({**NEW, "name": "x:reasoning"}, "is not allowed"),
        ({k: v for k, v in NEW.items() if k != "path"}, "path is required"),
        ({**NEW, "name": "n" * 200}, "name"),
    ],
)
async def test_a_bad_entry_is_a_400_before_any_supervisor_is_asked(
    admin: httpx.AsyncClient, entry: dict[str, Any], why: str
) -> None:
    err = error(await admin.post("/v1/admin/models", json=entry), 400)
    assert why in err["message"] and err["code"] == "bad_request"


async def test_without_a_supervisor_adding_or_removing_is_a_503_that_says_so(admin: httpx.AsyncClient) -> None:
    err = error(await admin.post("/v1/admin/models", json=NEW), 503)
    assert "no supervisor to start pools" in err["message"]
    err = error(await admin.delete("/v1/admin/models/gemma-3-270m"), 503)
    assert "no supervisor to start pools" in err["message"]


async def test_removing_the_default_or_an_unknown_model_is_refused(admin: httpx.AsyncClient) -> None:
    assert "default model" in error(await admin.delete(f"/v1/admin/models/{DEFAULT_MODEL_NAME}"), 400)["message"]
    error(await admin.delete("/v1/admin/models/nope"), 404)
    error(await admin.delete("/v1/admin/models/a.b.c%20d"), 400)


async def test_the_supervisor_s_answer_is_the_response(gw: Gateway, admin: httpx.AsyncClient) -> None:
    asked: list[PoolStart] = []

    async def failing(req: PoolStart) -> PoolReply:
        asked.append(req)
        return PoolReply(ok=False, code="unavailable", message="its pool exited", log_tail="Traceback: boom")

    sub = await supervisor(gw, subjects.POOLS_START, PoolStart, failing)
    try:
        err = error(await admin.post("/v1/admin/models", json=NEW), 503)
        assert err["message"] == "its pool exited" and err["log_tail"] == "Traceback: boom"
        assert asked[0].card.name == "smol-copy" and asked[0].timeout_s == gw.settings.model_start_timeout_s
    finally:
        await gw.bus.unsubscribe(sub)

    async def starting(req: PoolStart) -> PoolReply:
        return PoolReply(ok=True, card=req.card)

    async def stopping(req: PoolStop) -> PoolReply:
        return PoolReply(ok=True, card=gw.settings.registry.get(req.name))

    subs = [
        await supervisor(gw, subjects.POOLS_START, PoolStart, starting),
        await supervisor(gw, subjects.POOLS_STOP, PoolStop, stopping),
    ]
    try:
        r = await admin.post("/v1/admin/models", json=NEW)
        assert r.status_code == 201 and r.json()["name"] == "smol-copy" and r.json()["pool"] == "smolcopy"
        r = await admin.delete("/v1/admin/models/gemma3-270m")  # by an alias
        assert r.status_code == 200 and r.json()["name"] == "gemma-3-270m"
    finally:
        for s in subs:
            await gw.bus.unsubscribe(s)
