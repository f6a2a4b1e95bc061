"""safety_in judges each request by its tenant's policy (`Work.safety`) and records the tenant's strike policy."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.safety import InputGuard
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ErrorCode, SafetyInPart, StageRecord, StrikePolicy, TenantSafety, Work, subjects
from switchyard.services.safety_in.service import SafetyIn

OPENAI_KEY = "here is my key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def work(safety: TenantSafety) -> Work:
    return Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=OPENAI_KEY, safety=safety)


async def test_thresholds_and_strikes_follow_the_tenant(nats_server: NatsServer) -> None:
    bus = await Bus.connect(nats_server.url, "safety_in", "s1", setup_tracing("safety_in"))
    await bus.ensure_log_stream()
    records = RecordTap()
    await bus.subscribe(subjects.log_stage("safety_in"), StageRecord, records.on)
    stage = SafetyIn(bus, InputGuard(use_embeddings=False), None)
    blocked = work(TenantSafety())
    with pytest.raises(BusError) as e:
        await stage.check(blocked)
    assert e.value.code == ErrorCode.policy_violation
    rec = await records.of(blocked.rid)
    assert rec.decision["action"] == "block" and isinstance(rec.part, SafetyInPart)
    assert rec.part.strikes == StrikePolicy()

    lenient = TenantSafety.model_validate({"thresholds": {"secrets": {"block_at": None}}, "strikes": {"threshold": 2}})
    flagged = work(lenient)
    decision = await stage.check(flagged)
    rec = await records.of(flagged.rid)
    assert decision.action == "flag" and isinstance(rec.part, SafetyInPart) and rec.part.strikes == lenient.strikes
    assert [(v.category, v.action) for v in decision.verdicts] == [("secrets", "flag")]

    # The next request of a tenant without overrides is judged by the shipped policy again.
    with pytest.raises(BusError):
        await stage.check(work(TenantSafety.model_validate({"strikes": {"enabled": False}})))
    await bus.close()


class RecordTap:
    """Stage records as the logger would read them, by request id."""

    def __init__(self) -> None:
        self.seen: dict[str, asyncio.Future[StageRecord]] = {}

    def _slot(self, rid: str) -> asyncio.Future[StageRecord]:
        return self.seen.setdefault(rid, asyncio.get_running_loop().create_future())

    async def on(self, rec: StageRecord) -> None:
        slot = self._slot(rec.rid)
        if not slot.done():
            slot.set_result(rec)

    async def of(self, rid: str) -> StageRecord:
        return await asyncio.wait_for(self._slot(rid), 10)
