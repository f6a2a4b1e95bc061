"""Abuse detection end to end at the bus: stage records → the logger's monitor suspends the key →
the gateway answers it with 403 and a reason → an admin reinstates it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from switchyard.libs.bus import Bus
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import GatewayPart, SafetyInPart, StageRecord
from switchyard.services.logger.abuse import start_abuse_monitor
from switchyard.services.logger.settings import LoggerSettings
from tests.services.gateway.harness import Gateway, Responder
from tests.wait import wait_for


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


async def standing_of(gw: Gateway, key_id: str, until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The key's standing in the admin listing, once the abuse monitor has written one that satisfies `until`:
    the proof that the monitor has counted what was sent, so a "not suspended" after it means something."""

    async def listed() -> dict[str, Any] | None:
        async with httpx.AsyncClient(base_url=gw.url) as c:
            data = (await c.get("/v1/admin/keys/standing", headers=gw.auth(gw.admin_key))).json()["data"]
        mine: dict[str, Any] | None = next((s for s in data if s["key_id"] == key_id), None)
        return mine if mine is not None and until(mine) else None

    got: dict[str, Any] = await wait_for(listed, what=f"the abuse monitor's standing of {key_id}")
    return got


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
    # The monitor has counted both blocks and the three flags, and left the key active.
    counted = await standing_of(gw, key.id, lambda s: s["blocked"] == 2 and s["flagged"] == 3)
    assert counted["state"] == "active"
    assert (await status_of(gw, raw)).status_code != 403
    blocked.append(await flagged_request(responder.bus, key.id, "block"))

    async def refused() -> httpx.Response | None:
        r = await status_of(gw, raw)
        return r if r.status_code == 403 else None

    r = await wait_for(refused, what="the suspended key to be refused")
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

    async def admitted() -> bool:
        return (await status_of(gw, raw)).status_code != 403

    await wait_for(admitted, what="the reinstated key to be admitted")
    assert (await status_of(gw, raw)).status_code != 403
    # One new block after reinstatement is far from the threshold again.
    await flagged_request(responder.bus, key.id, "block")
    counted = await standing_of(gw, key.id, lambda s: s["blocked"] == 1)
    assert counted["state"] == "active"
    assert (await status_of(gw, raw)).status_code != 403
    await consumer.stop()
