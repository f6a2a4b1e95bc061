"""Abuse detection end to end at the bus: stage records → the logger's monitor suspends the key →
the gateway answers it with 403 and a reason → an admin reinstates it."""

from __future__ import annotations

import asyncio
import os
import uuid

import httpx

from switchyard.libs.bus import Bus
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import GatewayPart, SafetyInPart, StageRecord
from switchyard.services.logger.abuse import start_abuse_monitor
from switchyard.services.logger.settings import LoggerSettings
from tests.services.gateway.harness import Gateway, Responder


async def flagged_request(bus: Bus, key_id: str, action: str) -> str:
    rid = uuid.uuid4().hex
    await bus.log_stage(
        StageRecord(
            rid=rid,
            stage="safety_in",
            started_ms=now_ms(),
            duration_ms=1,
            status="error" if action == "block" else "ok",
            decision={"action": action},
            part=SafetyInPart(safety_action=action),
        )
    )
    await bus.log_stage(
        StageRecord(rid=rid, stage="gateway", started_ms=now_ms(), duration_ms=1, part=GatewayPart(key_id=key_id))
    )
    return rid


async def status_of(gw: Gateway, key: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        return await c.get("/v1/conversations/whatever", headers=gw.auth(key))


async def test_key_suspended_after_threshold_then_reinstated(gw: Gateway, responder: Responder) -> None:
    os.environ["SWITCHYARD_LOGGER_ABUSE_THRESHOLD"] = "3"
    os.environ["SWITCHYARD_LOGGER_ABUSE_DURABLE"] = f"abuse-{uuid.uuid4().hex[:6]}"
    try:
        consumer = await start_abuse_monitor(responder.bus, LoggerSettings())
    finally:
        del os.environ["SWITCHYARD_LOGGER_ABUSE_THRESHOLD"], os.environ["SWITCHYARD_LOGGER_ABUSE_DURABLE"]
    assert consumer is not None
    key, raw = await gw.keys.create("acme", "free", user="mallory")
    # Allowed requests, flags (not strikes by default) and another key's blocks do not count against this key.
    await flagged_request(responder.bus, key.id, "allow")
    await flagged_request(responder.bus, "someone-else", "block")
    blocked = [await flagged_request(responder.bus, key.id, "block")]
    for _ in range(3):
        await flagged_request(responder.bus, key.id, "flag")
    blocked.append(await flagged_request(responder.bus, key.id, "block"))
    await asyncio.sleep(1.0)
    assert (await status_of(gw, raw)).status_code != 403
    blocked.append(await flagged_request(responder.bus, key.id, "block"))
    for _ in range(50):
        r = await status_of(gw, raw)
        if r.status_code == 403:
            break
        await asyncio.sleep(0.2)
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "forbidden" and "suspended" in err["message"] and "3 blocked requests" in err["message"]

    async with httpx.AsyncClient(base_url=gw.url) as c:
        listed = (await c.get("/v1/admin/keys/standing", headers=gw.auth(gw.admin_key))).json()["data"]
        mine = next(s for s in listed if s["key_id"] == key.id)
        assert mine["state"] == "suspended" and [x["rid"] for x in mine["strikes"]] == blocked
        assert (await c.post(f"/v1/admin/keys/{key.id}/reinstate", headers=gw.auth(gw.pro_key))).status_code == 403
        ok = await c.post(f"/v1/admin/keys/{key.id}/reinstate", headers=gw.auth(gw.admin_key))
        assert ok.status_code == 200 and ok.json()["state"] == "active"
    for _ in range(50):
        if (await status_of(gw, raw)).status_code != 403:
            break
        await asyncio.sleep(0.2)
    assert (await status_of(gw, raw)).status_code != 403
    # One new block after reinstatement is far from the threshold again.
    await flagged_request(responder.bus, key.id, "block")
    await asyncio.sleep(1.0)
    assert (await status_of(gw, raw)).status_code != 403
    await consumer.stop()
