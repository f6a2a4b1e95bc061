"""The life of one request on the bus, independent of the HTTP connection that asked for it.

A `Run` subscribes to `chat.events.<rid>` before the work is published (so no event is lost), keeps every
event in order with its sequence number (the SSE `id`), and ends on `done`, `error`, a Stop, or the
deadline. HTTP responses are readers of a run: they follow its events from any position, which is what
lets a client reconnect with `Last-Event-ID`. When the last reader leaves before the end, the run is
cancelled (after an optional grace period) so inference stops decoding for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from libs.bus import Bus, BusError, Holder, Liveness
from libs.bus import headers as H
from libs.bus.bus import FORWARD_ACK_S
from schemas import (
    CancelNotice,
    ChatEvent,
    ErrorCode,
    ErrorInfo,
    GatewayOutcome,
    GatewayPart,
    LoggedRequest,
    SaveTurn,
    SaveTurnAck,
    StageRecord,
    Turn,
    Usage,
    Work,
    WorkAccepted,
    subjects,
)
from services.gateway.errors import ApiError, status_of
from services.gateway.metrics import Metrics
from services.gateway.settings import GatewaySettings

log = structlog.get_logger()

TERMINAL = ("done", "error")
# The client ended the answer: what it had received by then is the answer that is kept.
CLIENT_STOPS = ("client_disconnected", "stopped")
FinishHook = Callable[["Run"], Awaitable[None]]


@dataclass
class Run:
    rid: str
    api: str
    route: str
    tenant: str
    key_id: str
    span: trace.Span
    started_ms: int = field(default_factory=H.now_ms)
    t0: float = field(default_factory=time.perf_counter)
    deadline_ms: int = 0
    work: Work | None = None
    events: list[ChatEvent] = field(default_factory=list)
    # The terminal event once it is known; set before the finish hooks run and before readers see it.
    final: ChatEvent | None = None
    finished: bool = False
    launched: bool = False
    cancel_reason: str | None = None
    first_event_s: float | None = None
    first_token_s: float | None = None  # the first delta or thinking text: what a user sees as the answer starting
    readers: int = 0
    on_finish: list[FinishHook] = field(default_factory=list)
    holder: Holder = field(default_factory=Holder)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _sub: Any = None
    _timers: list[asyncio.TimerHandle] = field(default_factory=list)

    @property
    def terminal(self) -> ChatEvent | None:
        return self.events[-1] if self.events and self.events[-1].type in TERMINAL else None

    @property
    def usage(self) -> Usage:
        t = self.final
        return t.usage if t is not None and t.usage is not None else Usage()

    @property
    def client_status(self) -> str:
        t = self.terminal
        if self.cancel_reason in CLIENT_STOPS:
            return "stopped"
        if t is None or t.type == "error":
            return "error"
        # A Stop sent through another replica reaches us only as the pipeline's cancelled answer.
        return "stopped" if t.finish_reason == "cancelled" else "complete"

    def activate(self) -> contextlib.AbstractContextManager[trace.Span]:
        """Make the request's server span current, so bus messages sent now carry its traceparent."""
        return trace.use_span(self.span, end_on_exit=False)

    def _push(self, event: ChatEvent) -> None:
        if self.finished or self.terminal is not None:
            return
        if self.first_event_s is None:
            self.first_event_s = time.perf_counter() - self.t0
        self.events.append(event)
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int = -1) -> AsyncIterator[tuple[int, ChatEvent]]:
        """Events after sequence number `after`, live until the terminal one."""
        i = after + 1
        while True:
            while i < len(self.events):
                yield i, self.events[i]
                i += 1
            if self.terminal is not None or self.finished:
                return
            await self._wake.wait()


class Streams:
    def __init__(self, bus: Bus, settings: GatewaySettings, metrics: Metrics):
        self.bus = bus
        self.settings = settings
        self.metrics = metrics
        self.runs: dict[str, Run] = {}
        self.active = 0
        self.liveness = Liveness(
            bus,
            self._holder_lost,
            idle_s=settings.liveness_idle_s,
            period_s=settings.liveness_period_s,
            probe_s=settings.liveness_probe_s,
        )
        self._tasks: set[asyncio.Task[Any]] = set()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- starting --------------------------------------------------------------------------

    def begin(
        self, rid: str, api: str, route: str, tenant: str, key_id: str, parent: otel_context.Context | None
    ) -> Run:
        """Admit a request and open its server span; nothing is published yet."""
        if self.active >= self.settings.max_active_streams:
            self.metrics.rate_limited.labels("admission").inc()
            raise ApiError(
                ErrorCode.overloaded,
                f"gateway is at its limit of {self.settings.max_active_streams} concurrent streams",
                retry_after=1,
            )
        span = self.bus.tracer.start_span(
            route,
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": route.split(" ", 1)[0],
                "http.route": route.split(" ", 1)[-1],
                "switchyard.rid": rid,
                "switchyard.tenant": tenant,
                "switchyard.api": api,
            },
        )
        run = Run(rid=rid, api=api, route=route, tenant=tenant, key_id=key_id, span=span)
        self.active += 1
        self.metrics.active_streams.set(self.active)
        return run

    async def abandon(self, run: Run, error: BusError) -> None:
        """A request refused before launch (unknown chat, limit): return its lease, close the span, keep nothing."""
        if run.launched:  # the publish itself failed: it is a run, and ends like one
            await self._end(run, ChatEvent(rid=run.rid, type="error", error=error.info()))
            return
        for hook in run.on_finish:
            try:
                await hook(run)
            except Exception:
                log.exception("finish hook failed", rid=run.rid)
        run.span.set_status(Status(StatusCode.ERROR, error.message))
        run.span.set_attribute("http.response.status_code", status_of(error))
        run.span.end()
        self.active -= 1
        self.metrics.active_streams.set(self.active)

    async def launch(self, run: Run, work: Work) -> None:
        run.work = work
        run.deadline_ms = H.now_ms() + int(self.settings.request_timeout_s * 1000)

        async def on_event(event: ChatEvent) -> None:
            await self._receive(run, event)

        run._sub = await self.bus.watch(subjects.chat_events(run.rid), ChatEvent, on_event)
        run.launched = True
        self.runs[run.rid] = run
        run.holder = self.liveness.watch(run.rid)
        loop = asyncio.get_running_loop()
        run._timers.append(loop.call_later(self.settings.request_timeout_s, self._expire, run))
        # The server must know the subscription before the work goes out, or the first events could be lost.
        await self.bus.flush()
        with run.activate():
            # Acked at once by a context replica; nobody listening fails the request now, not at its deadline.
            await self.bus.request(
                subjects.CONTEXT,
                work,
                WorkAccepted,
                timeout=FORWARD_ACK_S,
                rid=run.rid,
                tenant=run.tenant,
                deadline_ms=run.deadline_ms,
            )

    # ---- events ----------------------------------------------------------------------------

    async def _receive(self, run: Run, event: ChatEvent) -> None:
        if run.final is not None:
            return
        if event.type == "holder":
            run.holder.took(event.stage or "", event.replica or "")
            return
        run.holder.heard()
        if run.cancel_reason in CLIENT_STOPS and event.type in ("delta", "thinking"):
            return  # in flight behind the client's Stop: it is not shown, so it is not saved either
        if run.first_token_s is None and event.type in ("delta", "thinking") and event.text:
            # Relayed to the client as it arrives; a tool result, a refusal or an error is no first token.
            run.first_token_s = time.perf_counter() - run.t0
            self.metrics.ttft.labels(run.api).observe(run.first_token_s)
        if event.type in TERMINAL:
            await self._end(run, event)
        else:
            run._push(event)

    async def _end(self, run: Run, event: ChatEvent, *, ours: bool = False) -> None:
        """Settle the request (limits) before the client sees the last event: a client that sends its next
        request the moment it gets `done` must find its stream lease already returned.

        `ours`: the gateway made this event (deadline, Stop without an answer); it goes on the bus too, so a
        replica replaying the stream sees the same ending."""
        if run.final is not None or run.finished:
            return
        run.final = event
        if ours:
            try:
                await self.bus.publish(subjects.chat_events(run.rid), event, rid=run.rid, tenant=run.tenant)
            except Exception as e:
                log.warning("final event not published", rid=run.rid, error=str(e))
        for hook in run.on_finish:
            try:
                await hook(run)
            except Exception:
                log.exception("finish hook failed", rid=run.rid)
        run._push(event)
        self._spawn(self._finish(run))

    async def _holder_lost(self, rid: str, stage: str, replica: str, why: str) -> None:
        """The process holding the run died, or what it sent on was lost: end it now, keeping what the
        client already has."""
        run = self.runs.get(rid)
        if run is None or run.final is not None or run.finished:
            return
        self.metrics.cancels.labels("holder_lost").inc()
        if why == "gone":
            info = ErrorInfo.of(ErrorCode.unavailable, f"the {stage} stage stopped while answering; please retry")
        else:
            info = ErrorInfo.of(ErrorCode.unavailable, f"the answer was lost in transit after {stage}; please retry")
        run.span.add_event("holder_lost", {"stage": stage, "replica": replica, "why": why})
        self._spawn(self._publish_cancel(run, "holder_lost"))
        if stage == "safety_out" and why == "gone":
            await self._save_relayed(run)  # the stage that would have saved the turn is gone
        await self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True)

    async def _save_relayed(self, run: Run) -> None:
        work = run.work
        if work is None or not work.persist or not work.chat_id:
            return
        text = "".join(e.text for e in run.events if e.type == "delta")
        turn = Turn(
            id=uuid.uuid4().hex,
            rid=run.rid,
            user_text=work.text,
            answer=text,
            status="error",
            usage=Usage(),
            created_ms=H.now_ms(),
        )
        try:
            await self.bus.request(
                subjects.SAVE_TURN,
                SaveTurn(tenant=work.tenant, user=work.user, chat_id=work.chat_id, turn=turn),
                SaveTurnAck,
                deadline_ms=H.now_ms() + 10_000,
            )
        except Exception as e:
            log.warning("partial answer not saved", rid=run.rid, error=str(e))

    def _expire(self, run: Run) -> None:
        if run.final is not None or run.finished:
            return
        info = ErrorInfo.of(ErrorCode.deadline_exceeded, f"no answer within {self.settings.request_timeout_s:g}s")
        self._spawn(self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True))
        self._spawn(self._publish_cancel(run, "deadline_exceeded"))

    async def _publish_cancel(self, run: Run, reason: str) -> None:
        self.metrics.cancels.labels(reason).inc()
        delivered = None
        if reason in CLIENT_STOPS:
            delivered = sum(len(e.text) for e in run.events if e.type == "delta")
        try:
            with run.activate():
                await self.bus.publish(
                    subjects.chat_cancel(run.rid),
                    CancelNotice(rid=run.rid, reason=reason, delivered_chars=delivered),
                    rid=run.rid,
                    tenant=run.tenant,
                )
        except Exception as e:
            log.warning("cancel not published", rid=run.rid, error=str(e))

    async def cancel(self, run: Run, reason: str) -> None:
        """Stop a running request; the pipeline answers with its last event, or we end it ourselves."""
        if run.finished or run.final is not None or run.cancel_reason is not None:
            return
        run.cancel_reason = reason
        run.span.add_event("cancel", {"reason": reason})
        await self._publish_cancel(run, reason)
        loop = asyncio.get_running_loop()
        run._timers.append(loop.call_later(self.settings.cancel_wait_s, self._cancel_timeout, run))

    def _cancel_timeout(self, run: Run) -> None:
        done = ChatEvent(rid=run.rid, type="done", finish_reason="cancelled", usage=Usage())
        self._spawn(self._end(run, done, ours=True))

    # ---- readers ---------------------------------------------------------------------------

    def attach(self, run: Run) -> None:
        run.readers += 1

    def detach(self, run: Run, completed: bool) -> None:
        """Synchronous on purpose: it runs in `finally` of a response the server may be cancelling."""
        run.readers -= 1
        if completed or run.readers > 0 or run.finished or run.terminal is not None or not run.launched:
            return
        grace = self.settings.resume_grace_s
        if grace <= 0:
            self._spawn(self.cancel(run, "client_disconnected"))
            return

        def later() -> None:
            if run.readers == 0:
                self._spawn(self.cancel(run, "client_disconnected"))

        run._timers.append(asyncio.get_running_loop().call_later(grace, later))

    # ---- ending ----------------------------------------------------------------------------

    async def _finish(self, run: Run) -> None:
        if run.finished:
            return
        run.finished = True
        self.liveness.forget(run.rid)
        run._wake.set()
        for timer in run._timers:
            timer.cancel()
        if run._sub is not None:
            with contextlib.suppress(Exception):
                await run._sub.unsubscribe()
        self.active -= 1
        self.metrics.active_streams.set(self.active)
        duration = time.perf_counter() - run.t0
        status = run.client_status
        self.metrics.stream_duration.labels(run.api, status).observe(duration)
        terminal = run.terminal
        error = terminal.error if terminal is not None and terminal.type == "error" else None
        run.span.set_attribute("http.response.status_code", 200)
        run.span.set_attribute("switchyard.client_status", status)
        if error is not None:
            run.span.set_status(Status(StatusCode.ERROR, error.message))
        with run.activate():
            await self.bus.log_stage(
                StageRecord(
                    rid=run.rid,
                    stage="gateway",
                    tenant=run.tenant,
                    started_ms=run.started_ms,
                    duration_ms=duration * 1000,
                    status="error" if error is not None else "ok",
                    error=error,
                    part=self._record(run, status),
                )
            )
        run.span.end()
        run._timers = [asyncio.get_running_loop().call_later(self.settings.resume_ttl_s, self._forget, run.rid)]

    def _record(self, run: Run, status: str) -> GatewayPart:
        terminal = run.terminal
        # The logger merges every stage's part into one record; what only the gateway saw sits under
        # "gateway" so it never overwrites the status, usage or finish reason the answering stages report.
        return GatewayPart(
            api=run.api,
            request=LoggedRequest.of(run.work) if run.work is not None else LoggedRequest(),
            client_status=status,
            key_id=run.key_id,
            gateway=GatewayOutcome(
                route=run.route,
                cancel_reason=run.cancel_reason,
                finish_reason=terminal.finish_reason if terminal is not None else None,
                usage=run.usage,
                events=len(run.events),
                first_event_ms=run.first_event_s * 1000 if run.first_event_s is not None else None,
            ),
        )

    def _forget(self, rid: str) -> None:
        self.runs.pop(rid, None)

    async def close(self) -> None:
        """Shutdown: cancel what still runs so inference frees it, and record it."""
        await self.liveness.close()
        for run in list(self.runs.values()):
            if not run.finished:
                await self.cancel(run, "gateway_shutdown")
                info = ErrorInfo.of(ErrorCode.unavailable, "gateway shutting down")
                await self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True)
                await self._finish(run)
        for run in self.runs.values():
            for timer in run._timers:
                timer.cancel()
        self.runs.clear()
