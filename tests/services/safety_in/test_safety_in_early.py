"""Input safety's classifier pass starts from context's early copy of the request (`subjects.EARLY`): the
check then takes that pass instead of running its own, with the same verdicts; a request whose text
changed since runs its own."""

from __future__ import annotations

import uuid

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.safety import InputGuard
from switchyard.libs.safety.batcher import ScoreBatcher
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import TenantSafety, Work
from switchyard.services.safety_in.service import SafetyIn


def work(text: str) -> Work:
    return Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=text)


@pytest.fixture(scope="module")
async def stage(nats_server: NatsServer) -> SafetyIn:
    bus = await Bus.connect(nats_server.url, "safety_in", "early", setup_tracing("safety_in"))
    guard = InputGuard()
    return SafetyIn(bus, guard, ScoreBatcher(guard.classifier, max_texts=16, threads=1))


async def test_the_check_takes_the_early_pass(stage: SafetyIn) -> None:
    assert stage.batcher is not None
    w = work("Which bread rises faster, rye or wheat?")
    fresh = await stage.check(w.model_copy(update={"rid": uuid.uuid4().hex}))
    passes = stage.batcher.passes
    await stage.start_early(w)
    decision = await stage.check(w)
    assert stage.batcher.passes - passes == 1 and stage.early.taken == 1
    assert decision.verdicts == fresh.verdicts


async def test_a_changed_text_is_judged_again(stage: SafetyIn) -> None:
    assert stage.batcher is not None
    w = work("What is the capital of Australia?")
    await stage.start_early(w)
    taken, passes = stage.early.taken, stage.batcher.passes
    await stage.check(w.model_copy(update={"text": "What is the capital of Austria?"}))
    assert stage.early.taken == taken and stage.batcher.passes - passes >= 1


async def test_a_tenant_policy_read_since_still_takes_the_early_pass(stage: SafetyIn) -> None:
    """The early copy carries no tenant policy yet (context reads it afterwards); the pass is the classifier's
    scores, which any policy's guard reads, so the check takes it and judges with the tenant's thresholds."""
    assert stage.batcher is not None
    strict = TenantSafety.model_validate({"thresholds": {"S2": {"flag_at": 0.0, "block_at": None}}})
    w = work("How do I pick the lock of my own front door?")
    fresh = await stage.check(w.model_copy(update={"rid": uuid.uuid4().hex, "safety": strict}))
    assert any(v.category == "S2" and v.action == "flag" for v in fresh.verdicts)  # the tenant's bar applied
    taken, passes = stage.early.taken, stage.batcher.passes
    await stage.start_early(w)
    decision = await stage.check(w.model_copy(update={"safety": strict}))
    assert stage.early.taken - taken == 1 and stage.batcher.passes - passes == 1
    assert decision.verdicts == fresh.verdicts
