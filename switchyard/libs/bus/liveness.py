"""A dead stage costs the client a second, not its deadline.

Every stage that takes a request says so (a `holder` event: stage and replica). A watcher (the
gateway for its runs; safety_out for the inference replica feeding each stream) asks the latest
holder's own health subject once a request has been quiet for `idle_s`; nobody listening means that
process is gone, and `lost` ends the request at once. A probe that goes unanswered is not proof: a
process busy with a long prefill on a loaded machine answers late, so only `hung_s` without any
answer or event counts as gone. Stages before the latest one are not asked: they handed the request
on, and may die afterwards without harm.

A holder that lives but says it no longer holds the request handed it on or ended it; normally the
next holder's event or the ending follows within milliseconds. When neither comes for `let_go_s`,
they were lost in transit (a NATS node died under them) and the request is ended the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from switchyard.libs.bus.bus import Bus, BusError, NobodyListens
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import HealthReply, HealthRequest, subjects

log = structlog.get_logger()

# Pipeline order: a later stage holding the request means the earlier ones are done with it.
_ORDER = {s: i for i, s in enumerate(subjects.STAGES)}


@dataclass
class Holder:
    """Who holds one run now, as far as its events tell."""

    stage: str | None = None
    replica: str | None = None
    last_event: float = field(default_factory=time.monotonic)
    last_alive: float = field(default_factory=time.monotonic)
    # When the holder, alive, first said it no longer holds the request (None: holds it, or not asked).
    let_go_at: float | None = None

    def heard(self) -> None:
        self.last_event = self.last_alive = time.monotonic()
        self.let_go_at = None

    def took(self, stage: str, replica: str) -> None:
        self.heard()
        if self.stage is None or _ORDER.get(stage, -1) >= _ORDER.get(self.stage, -1):
            self.stage, self.replica = stage, replica


# rid, stage, replica, why: "gone" (the process died or hangs) or "let_go" (alive, but what followed was lost)
Lost = Callable[[str, str, str, str], Awaitable[None]]


class Liveness:
    """One watcher per process for all the requests it waits on; `lost` ends one whose holder is gone."""

    def __init__(
        self,
        bus: Bus,
        lost: Lost,
        *,
        idle_s: float,
        period_s: float,
        probe_s: float,
        hung_s: float = 10.0,
        let_go_s: float = 5.0,
    ):
        self.bus = bus
        self.lost = lost
        self.idle_s = idle_s
        self.period_s = period_s
        self.probe_s = probe_s
        self.hung_s = hung_s
        self.let_go_s = let_go_s
        self.runs: dict[str, Holder] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, rid: str) -> Holder:
        if self._task is None or self._task.done():
            # A context of its own: probes must not carry the deadline of the request that started it.
            self._task = asyncio.create_task(self._loop(), context=contextvars.Context())
        return self.runs.setdefault(rid, Holder())

    def forget(self, rid: str) -> None:
        self.runs.pop(rid, None)

    async def _loop(self) -> None:
        # Invariant: each pass probes every quiet run at most once; a run leaves `runs` when it ends.
        while True:
            await asyncio.sleep(self.period_s)
            now = time.monotonic()
            quiet = [(rid, h) for rid, h in list(self.runs.items()) if now - h.last_event >= self.idle_s]
            if quiet:
                await asyncio.gather(*(self._probe(rid, h) for rid, h in quiet), return_exceptions=True)

    async def _probe(self, rid: str, h: Holder) -> None:
        stage, replica = h.stage, h.replica
        if stage is None or replica is None:
            return  # nobody has taken it yet (context says so as it starts): nothing to ask
        subject = subjects.health_of(stage, replica)
        why = "gone"
        try:
            reply = await self.bus.request(
                subject,
                HealthRequest(probe="liveness", rid=rid),
                HealthReply,
                timeout=self.probe_s,
                rid=rid,
                deadline_ms=now_ms() + int(self.probe_s * 1000),
            )
            now = time.monotonic()
            h.last_alive = now
            if reply.holds is not False or (h.stage, h.replica) != (stage, replica):
                return
            if h.let_go_at is None:
                h.let_go_at = now
            if now - h.let_go_at < self.let_go_s:
                return
            why = "let_go"
        except NobodyListens:
            pass
        except BusError:  # no answer in time: hung, or only busy; long silence alone counts
            if time.monotonic() - h.last_alive < self.hung_s:
                return
        if rid in self.runs:
            self.forget(rid)
            log.warning("request holder gone", rid=rid, stage=stage, replica=replica, why=why)
            await self.lost(rid, stage, replica, why)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
