"""One request on the bus, independent of the HTTP connection that asked for it: where it is (`Phase`, with
one transition table), its events, and what the gateway records of it.

A `Run` keeps every event in order with its sequence number (the SSE `id`) and ends on `done`, `error`, a
Stop, or the deadline. HTTP responses are readers of a run: they follow its events from any position, which
is what lets a client reconnect with `Last-Event-ID`. Starting, ending and closing runs is `Runs` (runs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from opentelemetry import trace

from switchyard.libs.bus import Holder
from switchyard.libs.bus import headers as H
from switchyard.schemas import (
    ChatEvent,
    ErrorInfo,
    GatewayOutcome,
    GatewayPart,
    LoggedRequest,
    ReplayPart,
    Usage,
    Work,
)

TERMINAL = ("done", "error")
# The client ended the answer: what it had received by then is the answer that is kept.
CLIENT_STOPS = ("client_disconnected", "stopped")
FinishHook = Callable[["Run"], Awaitable[None]]


class Phase(StrEnum):
    """Where a run is. Every way to end (the pipeline's `done` or `error`, the deadline, a Stop the
    pipeline never answered, its holder lost, shutdown) goes through `ending` with the last event."""

    admitted = "admitted"  # counted, span open; nothing published yet
    refused = "refused"  # refused before launch (a limit, an unknown chat): nothing is kept
    running = "running"  # subscribed to its events and the work published
    cancelling = "cancelling"  # a Stop or a disconnect asked the pipeline to stop; its last event follows
    ending = "ending"  # the last event is known; the finish hooks run before readers see it
    ended = "ended"  # readers have every event, the last one included
    closed = "closed"  # recorded, span ended, unsubscribed; its events stay for resuming a while


NEXT: dict[Phase, tuple[Phase, ...]] = {
    Phase.admitted: (Phase.refused, Phase.running),
    Phase.running: (Phase.cancelling, Phase.ending),
    Phase.cancelling: (Phase.ending,),
    Phase.ending: (Phase.ended,),
    Phase.ended: (Phase.closed,),
    Phase.refused: (),
    Phase.closed: (),
}


@dataclass
class Rerun:
    """What makes a run an admin's re-run of a logged request (rerun.py); its record says so."""

    of: str
    mode: str
    overrides: dict[str, Any]
    by: str  # the admin key: not `key_id`, which abuse detection counts against


@dataclass
class Run:
    rid: str
    api: str
    route: str
    tenant: str
    key_id: str
    span: trace.Span
    rerun: Rerun | None = None
    phase: Phase = Phase.admitted
    started_ms: int = field(default_factory=H.now_ms)
    t0: float = field(default_factory=time.perf_counter)
    work: Work | None = None
    events: list[ChatEvent] = field(default_factory=list)
    # The last event (done or error) from `ending` on.
    last: ChatEvent | None = None
    cancel_reason: str | None = None
    first_event_s: float | None = None
    first_token_s: float | None = None  # the first delta or thinking text: what a user sees as the answer starting
    readers: int = 0
    # From inference's `prompt` event, before the answer's first text: the prompt's tokens and the engine build.
    prompt_tokens: int | None = None
    system_fingerprint: str | None = None
    on_finish: list[FinishHook] = field(default_factory=list)
    holder: Holder = field(default_factory=Holder)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Set and read by `Runs`: the events subscription, and the timers to cancel when the run closes.
    sub: Any = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)

    def to(self, phase: Phase) -> None:
        assert phase in NEXT[self.phase], f"run {self.rid}: {self.phase} -> {phase}"
        self.phase = phase

    @property
    def live(self) -> bool:
        """Published and not yet ending: its events still come."""
        return self.phase in (Phase.running, Phase.cancelling)

    @property
    def usage(self) -> Usage:
        t = self.last
        return t.usage if t is not None and t.usage is not None else Usage()

    @property
    def error(self) -> ErrorInfo | None:
        t = self.last
        return t.error if t is not None and t.type == "error" else None

    @property
    def client_status(self) -> str:
        t = self.last
        if self.cancel_reason in CLIENT_STOPS:
            return "stopped"
        if t is None or t.type == "error":
            return "error"
        # A Stop sent through another replica reaches us only as the pipeline's cancelled answer.
        return "stopped" if t.finish_reason == "cancelled" else "complete"

    def activate(self) -> contextlib.AbstractContextManager[trace.Span]:
        """Make the request's server span current, so bus messages sent now carry its traceparent."""
        return trace.use_span(self.span, end_on_exit=False)

    def push(self, event: ChatEvent) -> None:
        if self.first_event_s is None:
            self.first_event_s = time.perf_counter() - self.t0
        self.events.append(event)
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int = -1) -> AsyncIterator[tuple[int, ChatEvent]]:
        """Events after sequence number `after`, live until the last one."""
        async for batch in self.follow_batches(after):
            for item in batch:
                yield item

    async def follow_batches(self, after: int = -1) -> AsyncIterator[list[tuple[int, ChatEvent]]]:
        """As `follow`, every event already here at once: a reader that fell behind catches up in one go."""
        i = max(after, -1) + 1  # never a negative index: that would replay the tail
        while True:
            if i < len(self.events):
                batch = list(enumerate(self.events[i:], start=i))
                i += len(batch)
                yield batch
            if self.phase in (Phase.ended, Phase.closed) and i >= len(self.events):
                return
            if i >= len(self.events):
                await self._wake.wait()

    def part(self) -> GatewayPart | ReplayPart:
        """The gateway's part of the request's record. The logger merges every stage's part into one record;
        what only the gateway saw sits under "gateway" so it never overwrites the status, usage or finish
        reason the answering stages report."""
        request = LoggedRequest.of(self.work) if self.work is not None else LoggedRequest()
        finish_reason = self.last.finish_reason if self.last is not None else None
        if self.rerun is not None:
            part = ReplayPart(
                api="replay",
                replay_of=self.rerun.of,
                replay_mode=self.rerun.mode,
                overrides=self.rerun.overrides,
                request=request,
                client_status=self.client_status,
                replayed_by=self.rerun.by,
                finish_reason=finish_reason,
                events=len(self.events),
            )
            if self.last is not None and self.last.usage:
                part.usage = self.last.usage  # left out, not empty, when the run never reported any
            return part
        return GatewayPart(
            api=self.api,
            request=request,
            client_status=self.client_status,
            key_id=self.key_id,
            gateway=GatewayOutcome(
                route=self.route,
                cancel_reason=self.cancel_reason,
                finish_reason=finish_reason,
                usage=self.usage,
                events=len(self.events),
                first_event_ms=self.first_event_s * 1000 if self.first_event_s is not None else None,
            ),
        )
