"""The liveness watch: a holder that answers is left alone, one that is gone is reported at once, and a
watch started inside a request never carries that request's deadline into later probes."""

from __future__ import annotations

import asyncio
import uuid

from libs.bus import Bus, Liveness, NatsServer
from libs.bus.bus import MsgContext, _current
from libs.telemetry import setup_tracing
from schemas import HealthReply, HealthRequest, subjects


async def test_a_gone_holder_is_reported_and_a_live_one_is_not(nats_server: NatsServer) -> None:
    watcher = await Bus.connect(nats_server.url, "gateway", "w1", setup_tracing("gateway"))
    holder = await Bus.connect(nats_server.url, "tools", uuid.uuid4().hex[:6], setup_tracing("tools"))
    probed = asyncio.Event()

    async def health(_: HealthRequest) -> HealthReply:
        probed.set()
        return HealthReply(stage="tools", replica=holder.replica)

    await holder.subscribe(subjects.health_of("tools", holder.replica), HealthRequest, health, span=False)
    await holder.flush()
    lost: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

    async def on_lost(rid: str, stage: str, replica: str) -> None:
        await lost.put((rid, stage, replica))

    live = Liveness(watcher, on_lost, idle_s=0.05, period_s=0.05, probe_s=0.5)
    # Started as if inside a request whose deadline has long passed: the probes must not inherit it.
    token = _current.set(MsgContext(rid="old", tenant="t", deadline_ms=1))
    try:
        live.watch("r1").took("tools", holder.replica)
    finally:
        _current.reset(token)
    await asyncio.wait_for(probed.wait(), 10)
    probed.clear()
    await asyncio.wait_for(probed.wait(), 10)  # answered, so probed again later, never reported
    assert lost.empty()
    await holder.close()  # the process is gone: nobody listens on its health subject any more
    assert await asyncio.wait_for(lost.get(), 10) == ("r1", "tools", holder.replica)
    assert "r1" not in live.runs
    await live.close()
    await watcher.close()
