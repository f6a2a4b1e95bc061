"""The liveness watch: a holder that answers is left alone, one that is gone is reported at once, and a
watch started inside a request never carries that request's deadline into later probes."""

from __future__ import annotations

import asyncio
import uuid

from switchyard.libs.bus import Bus, Liveness, NatsServer
from switchyard.libs.bus.bus import MsgContext, _current
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, subjects
from tests.wait import wait_for


async def test_a_gone_holder_is_reported_and_a_live_one_is_not(nats_server: NatsServer) -> None:
    watcher = await Bus.connect(nats_server.url, "gateway", "w1", setup_tracing("gateway"))
    holder = await Bus.connect(nats_server.url, "tools", uuid.uuid4().hex[:6], setup_tracing("tools"))
    probed = asyncio.Event()

    async def health(_: HealthRequest) -> HealthReply:
        probed.set()
        return HealthReply(stage="tools", replica=holder.replica)

    await holder.subscribe(subjects.health_of("tools", holder.replica), HealthRequest, health, span=False)
    await holder.flush()
    lost: asyncio.Queue[tuple[str, str, str, str]] = asyncio.Queue()

    async def on_lost(rid: str, stage: str, replica: str, why: str) -> None:
        await lost.put((rid, stage, replica, why))

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
    assert await asyncio.wait_for(lost.get(), 10) == ("r1", "tools", holder.replica, "gone")
    assert "r1" not in live.runs
    await live.close()
    await watcher.close()


async def test_a_live_holder_that_let_go_is_reported_only_when_nothing_follows(nats_server: NatsServer) -> None:
    """The holder answers but no longer holds the request: what it handed on (the next holder's event, or
    the ending) was lost in transit. Reported after `let_go_s`, unless an event comes first."""
    watcher = await Bus.connect(nats_server.url, "gateway", "w2", setup_tracing("gateway"))
    holder = await Bus.connect(nats_server.url, "safety_out", uuid.uuid4().hex[:6], setup_tracing("safety_out"))
    held = {"kept"}
    asked: asyncio.Queue[str] = asyncio.Queue()

    async def health(req: HealthRequest) -> HealthReply:
        await asked.put(req.rid or "")
        return HealthReply(stage="safety_out", replica=holder.replica, holds=req.rid in held)

    await holder.subscribe(subjects.health_of("safety_out", holder.replica), HealthRequest, health, span=False)
    await holder.flush()
    lost: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def on_lost(rid: str, stage: str, replica: str, why: str) -> None:
        await lost.put((rid, why))

    live = Liveness(watcher, on_lost, idle_s=0.05, period_s=0.05, probe_s=0.5, let_go_s=0.3)
    kept, dropped, revived = live.watch("kept"), live.watch("dropped"), live.watch("revived")
    for h in (kept, dropped, revived):
        h.took("safety_out", holder.replica)
    # An event for `revived` keeps arriving (as a next holder's would): its let-go clock restarts each time.

    def dropped_reported() -> bool:
        revived.heard()
        return not lost.empty()

    # Asked every 0.15 s: quiet long enough to be probed, not long enough to count.
    await wait_for(dropped_reported, what="the dropped run reported", interval=0.15)
    assert await lost.get() == ("dropped", "let_go")
    assert set(live.runs) == {"kept", "revived"}
    seen: set[str] = set()
    while not {"kept", "revived"} <= seen:  # both still probed, neither reported
        seen.add(await asyncio.wait_for(asked.get(), 10))
    assert lost.empty()
    await live.close()
    await holder.close()
    await watcher.close()
