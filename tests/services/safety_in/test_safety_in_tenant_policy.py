"""safety_in judges each request by its tenant's policy (`Work.safety`) and records whether a flag is a strike."""

from __future__ import annotations

import uuid

import pytest

from libs.bus import BusError
from libs.safety import InputGuard
from schemas import ErrorCode, TenantSafety, Work
from services.safety_in.service import SafetyIn

OPENAI_KEY = "here is my key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def work(safety: TenantSafety) -> Work:
    return Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=OPENAI_KEY, safety=safety)


async def test_thresholds_and_strikes_follow_the_tenant() -> None:
    stage = SafetyIn(InputGuard(use_embeddings=False))
    with pytest.raises(BusError) as e:
        await stage.check(work(TenantSafety()))
    assert e.value.code == ErrorCode.policy_violation
    assert e.value.decision["action"] == "block" and e.value.decision["flag_is_strike"] is False

    lenient = TenantSafety.model_validate({"thresholds": {"secrets": {"block_at": None}}, "flag_is_strike": True})
    fwd = await stage.check(work(lenient))
    assert fwd.decision["action"] == "flag" and fwd.decision["flag_is_strike"] is True
    assert [(v.category, v.action) for v in fwd.work.verdicts] == [("secrets", "flag")]

    # The next request of a tenant without overrides is judged by the shipped policy again.
    with pytest.raises(BusError):
        await stage.check(work(TenantSafety(flag_is_strike=True)))
