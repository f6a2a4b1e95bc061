"""`request_until` on a real nats-server: silence and a failing responder are asked again within the bound;
a refusal of the request itself is not; past the bound the caller hears `unavailable`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.bus.retry import request_until
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ErrorCode, HealthReply, HealthRequest

SUBJECT = "test.retry.save"


@pytest.fixture
async def buses(nats_server: NatsServer) -> AsyncIterator[tuple[Bus, Bus]]:
    asker = await Bus.connect(nats_server.url, "safety_out", "a", setup_tracing("safety_out"))
    answerer = await Bus.connect(nats_server.url, "context", "b", setup_tracing("context"))
    yield asker, answerer
    await asker.close()
    await answerer.close()


async def test_nobody_listening_is_asked_again_until_a_responder_comes(buses: tuple[Bus, Bus]) -> None:
    asker, answerer = buses
    asked = asyncio.create_task(
        request_until(asker, SUBJECT, HealthRequest(), HealthReply, bound_s=20, attempt_s=1, first_pause_s=0.05)
    )
    await asyncio.sleep(0.3)  # the responder is down a while (a scenario, not a wait for an event)
    assert not asked.done()

    async def answer(_: HealthRequest) -> HealthReply:
        return HealthReply(stage="context", replica="b")

    await answerer.subscribe(SUBJECT, HealthRequest, answer, queue="context")
    await answerer.flush()
    reply = await asyncio.wait_for(asked, 20)
    assert reply.replica == "b"


async def test_a_failing_responder_is_asked_again_and_a_refusal_is_not(buses: tuple[Bus, Bus]) -> None:
    asker, answerer = buses
    calls: list[str] = []

    async def flaky(req: HealthRequest) -> HealthReply:
        calls.append(req.probe or "")
        if req.probe == "refuse":
            raise BusError(ErrorCode.bad_request, "no such thing")
        if len(calls) < 3:
            raise BusError(ErrorCode.internal, "database away")
        return HealthReply(stage="context", replica="b")

    await answerer.subscribe(SUBJECT + ".f", HealthRequest, flaky, queue="context")
    await answerer.flush()
    reply = await request_until(asker, SUBJECT + ".f", HealthRequest(), HealthReply, bound_s=20, first_pause_s=0.01)
    assert reply.replica == "b" and len(calls) == 3
    with pytest.raises(BusError) as refused:
        await request_until(asker, SUBJECT + ".f", HealthRequest(probe="refuse"), HealthReply, bound_s=20)
    assert refused.value.code == ErrorCode.bad_request and calls.count("refuse") == 1


async def test_past_the_bound_the_caller_hears_unavailable(buses: tuple[Bus, Bus]) -> None:
    asker, _ = buses
    t0 = time.monotonic()
    with pytest.raises(BusError) as gone:
        await request_until(asker, SUBJECT + ".nobody", HealthRequest(), HealthReply, bound_s=0.5, first_pause_s=0.05)
    assert gone.value.code == ErrorCode.unavailable and "did not answer within 0.5s" in gone.value.message
    assert time.monotonic() - t0 < 5
