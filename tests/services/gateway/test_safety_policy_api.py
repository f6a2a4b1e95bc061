"""`GET/PUT /v1/admin/safety-policy` against the real context service: admin only, validated, per
tenant, and on every later request of that tenant as `Work.safety`."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.schemas import TenantSafety
from tests.services.gateway.product import Product, product
from tests.services.gateway.test_conversations_api import assert_error, chat


@pytest.fixture(scope="module")
async def p(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Product]:
    async with product(nats_server, tmp_path_factory.mktemp("policy")) as prod:
        yield prod


async def test_admin_sets_a_tenant_policy_that_rides_on_its_requests(p: Product) -> None:
    policy = {
        "answer_release": "judged",
        "strikes": {"enabled": True, "threshold": 3, "window_s": 60.0},
        "thresholds": {"S14": {"block_at": None}},
    }
    body = {"tenant": "acme", "policy": policy}
    async with httpx.AsyncClient(base_url=p.url) as anon:
        assert_error(await anon.put("/v1/admin/safety-policy", json=body), 401, "unauthorized")
        assert_error(await anon.get("/v1/admin/safety-policy"), 401, "unauthorized")
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth()) as ann:
        assert_error(await ann.put("/v1/admin/safety-policy", json=body), 403, "forbidden")
        assert_error(await ann.get("/v1/admin/safety-policy", params={"tenant": "acme"}), 403, "forbidden")

    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.admin)) as admin:
        # Never set: the defaults, for the admin's own tenant when none is named.
        got = (await admin.get("/v1/admin/safety-policy")).json()
        assert got == {
            "tenant": "ops",
            "policy": {
                "answer_release": "stream",
                "strikes": {"enabled": True},
                "thresholds": {},
                "answer_thresholds": {},
            },
            "updated_ms": 0,
        }
        r = await admin.put("/v1/admin/safety-policy", json=body)
        assert r.status_code == 200, r.text
        stored = {**policy, "answer_thresholds": {}}  # the fields left out read back as their defaults
        assert r.json()["policy"] == stored and r.json()["updated_ms"] > 0
        got = (await admin.get("/v1/admin/safety-policy", params={"tenant": "acme"})).json()
        assert got["tenant"] == "acme" and got["policy"] == stored
        for bad in (
            {"policy": policy},
            {"tenant": "acme", "policy": {**policy, "answer_release": "later"}},
            {"tenant": "acme", "policy": {"thresholds": {"S99": {"flag_at": 0.5}}}},
            {"tenant": "acme", "policy": {"thresholds": {"S1": {"flag_at": 0.9, "block_at": 0.2}}}},
            {"tenant": "acme", "policy": {"strikes": 3}},
            {"tenant": "acme", "policy": {"strikes": {"threshold": 0}}},
            {"tenant": "acme", "policy": {"flag_is_strike": True}},
            {"tenant": "acme", "policy": policy, "extra": True},
        ):
            assert_error(await admin.put("/v1/admin/safety-policy", json=bad), 400, "bad_request")
        assert (await admin.get("/v1/admin/safety-policy", params={"tenant": "acme"})).json()["policy"] == stored

    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(), timeout=20) as ann:
        r = await chat(ann, uuid.uuid4().hex, "hello")
        safety = p.works[r.headers["x-request-id"]].safety
        assert safety == TenantSafety.model_validate(policy)
        assert safety.thresholds["S14"].model_fields_set == {"block_at"}
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.eve), timeout=20) as eve:
        r = await chat(eve, uuid.uuid4().hex, "hello")
        assert p.works[r.headers["x-request-id"]].safety == TenantSafety()

    # `{}` restores every default.
    async with httpx.AsyncClient(base_url=p.url, headers=p.auth(p.admin)) as admin:
        r = await admin.put("/v1/admin/safety-policy", json={"tenant": "acme", "policy": {}})
        assert r.status_code == 200 and r.json()["policy"] == TenantSafety().model_dump(mode="json")
