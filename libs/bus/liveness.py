"""A dead stage costs the client a second, not its deadline.

Every stage that takes a request says so (a `holder` event: stage and replica). A watcher (the
gateway for its runs; safety_out for the inference replica feeding each stream) asks the latest
holder's own health subject once a request has been quiet for `idle_s`; nobody listening means that
process is gone, and `lost` ends the request at once (a hung process that misses `misses` probes
in a row counts as gone too). Stages before the latest one are not asked: they handed the request
on, and may die afterwards without harm.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from libs.bus.bus import Bus, BusError, NobodyListens
from schemas import HealthReply, HealthRequest, subjects

log = structlog.get_logger()

# Pipeline order: a later stage holding the request means the earlier ones are done with it.
_ORDER = {s: i for i, s in enumerate(subjects.STAGES)}


@dataclass
class Holder:
    """Who holds one run now, as far as its events tell."""

    stage: str | None = None
    replica: str | None = None
    last_event: float = field(default_factory=time.monotonic)
    misses: int = 0

    def heard(self) -> None:
        self.last_event = time.monotonic()
        self.misses = 0

    def took(self, stage: str, replica: str) -> None:
        self.heard()
        if self.stage is None or _ORDER.get(stage, -1) >= _ORDER.get(self.stage, -1):
            self.stage, self.replica = stage, replica


Lost = Callable[[str, str, str], Awaitable[None]]  # rid, stage, replica


class Liveness:
    """One watcher per process for all the requests it waits on; `lost` ends one whose holder is gone."""

    def __init__(self, bus: Bus, lost: Lost, *, idle_s: float, period_s: float, probe_s: float, misses: int = 2):
        self.bus = bus
        self.lost = lost
        self.idle_s = idle_s
        self.period_s = period_s
        self.probe_s = probe_s
        self.misses = misses
        self.runs: dict[str, Holder] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, rid: str) -> Holder:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop())
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
        try:
            await self.bus.request(subject, HealthRequest(probe="liveness"), HealthReply, timeout=self.probe_s)
            h.misses = 0
            return
        except NobodyListens:
            gone = True
        except BusError:  # no answer in time: hung, or busy; only repeated silence counts
            h.misses += 1
            gone = h.misses >= self.misses
        if gone and rid in self.runs:
            self.forget(rid)
            log.warning("request holder gone", rid=rid, stage=stage, replica=replica)
            await self.lost(rid, stage, replica)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
