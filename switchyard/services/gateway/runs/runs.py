"""The gateway's runs (`gw.runs`): admitting, launching, ending and closing each `Run` (run.py).

A run subscribes to `chat.events.<rid>.direct` (every stage's own events) before the work is published
(so no event is lost); its answer's text and end come on this replica's one subscription to
`chat.steps.<this>.*`, one message per pass of each safety_out replica for all the runs it relays here
(`Work.relay` names this replica), made with the first run. Every way a launched run ends goes through
`Runs._end`. When the last reader leaves before the end, the run is
cancelled (after an optional grace period) so inference stops decoding for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode

from switchyard.libs.bus import Bus, BusError, Liveness
from switchyard.libs.bus import headers as H
from switchyard.libs.bus.bus import FORWARD_ACK_S
from switchyard.libs.bus.retry import request_until
from switchyard.schemas import (
    CancelNotice,
    ChatEvent,
    ErrorCode,
    ErrorInfo,
    SaveTurn,
    SaveTurnAck,
    StageRecord,
    Turn,
    Usage,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.schemas.frames import ChatFrame, chat_frame_event, decode_chat_step, decode_event
from switchyard.services.gateway.errors import ApiError, status_of
from switchyard.services.gateway.metrics import Metrics
from switchyard.services.gateway.runs.run import CLIENT_STOPS, TERMINAL, Phase, Rerun, Run
from switchyard.services.gateway.settings import GatewaySettings

log = structlog.get_logger()


class Runs:
    def __init__(self, bus: Bus, settings: GatewaySettings, metrics: Metrics):
        self.bus = bus
        self.settings = settings
        self.metrics = metrics
        self.by_rid: dict[str, Run] = {}
        self.active = 0
        self.liveness = Liveness(
            bus,
            self._holder_lost,
            idle_s=settings.liveness_idle_s,
            period_s=settings.liveness_period_s,
            probe_s=settings.liveness_probe_s,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._steps_sub: Any = None
        self._steps_made = asyncio.Lock()
        self._bus_lost: asyncio.TimerHandle | None = None
        self._bus_up = asyncio.Event()
        self._bus_up.set()
        bus.connection_listeners.append(self._connection_changed)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- starting --------------------------------------------------------------------------

    def begin(
        self,
        rid: str,
        api: str,
        route: str,
        tenant: str,
        key_id: str,
        parent: otel_context.Context | None,
        rerun: Rerun | None = None,
    ) -> Run:
        """Admit a request and open its server span; nothing is published yet."""
        if not self.bus.connected:
            # Reconnecting: the work could not be handed over, so say so now rather than after the ack's wait.
            raise ApiError(ErrorCode.unavailable, "the message bus is reconnecting; please retry", retry_after=1)
        if self.active >= self.settings.max_active_streams:
            self.metrics.rate_limited.labels("admission").inc()
            raise ApiError(
                ErrorCode.overloaded,
                f"gateway is at its limit of {self.settings.max_active_streams} concurrent streams",
                retry_after=1,
            )
        attributes = {
            "http.request.method": route.split(" ", 1)[0],
            "http.route": route.split(" ", 1)[-1],
            "switchyard.rid": rid,
            "switchyard.tenant": tenant,
            "switchyard.api": api,
        }
        if rerun is not None:
            attributes["switchyard.replay_of"] = rerun.of
        span = self.bus.tracer.start_span(route, context=parent, kind=SpanKind.SERVER, attributes=attributes)
        run = Run(rid=rid, api=api, route=route, tenant=tenant, key_id=key_id, span=span, rerun=rerun)
        self.active += 1
        self.metrics.active_streams.set(self.active)
        return run

    async def abandon(self, run: Run, error: BusError) -> None:
        """A request refused before launch (unknown chat, limit): return its lease, close the span, keep nothing."""
        if run.phase is not Phase.admitted:  # the publish itself failed: it is a run, and ends like one
            await self._end(run, ChatEvent(rid=run.rid, type="error", error=error.info()))
            return
        run.to(Phase.refused)
        await self._run_hooks(run)
        run.span.set_status(Status(StatusCode.ERROR, error.message))
        run.span.set_attribute("http.response.status_code", status_of(error))
        run.span.end()
        self.active -= 1
        self.metrics.active_streams.set(self.active)

    @contextlib.asynccontextmanager
    async def starting(self, run: Run) -> AsyncIterator[None]:
        """Around everything between `begin` and a launched run: a failure abandons the run, as its error."""
        try:
            yield
        except BusError as e:
            await self.abandon(run, e)
            raise
        except Exception as e:
            err = ApiError(ErrorCode.unavailable, f"bus: {e}")
            await self.abandon(run, err)
            raise err from e

    async def launch(self, run: Run, work: Work, subject: str = subjects.CONTEXT) -> None:
        """Subscribe to the run's events, then publish its work to `subject` (a re-run may skip stages)."""
        run.work = work
        deadline_ms = H.now_ms() + int(self.settings.request_timeout_s * 1000)

        async def on_event(event: ChatEvent) -> None:
            await self._receive(run, event)

        if self._steps_sub is None:
            # Made in a context of its own: it serves every run, not the request that happened to come first.
            await asyncio.create_task(self._hear_steps(), context=contextvars.Context())
        work.relay = self.bus.replica
        run.sub = await self.bus.watch_frames(
            subjects.chat_events(run.rid), functools.partial(decode_event, run.rid), on_event
        )
        run.to(Phase.running)
        self.by_rid[run.rid] = run
        run.holder = self.liveness.watch(run.rid)
        loop = asyncio.get_running_loop()
        run.timers.append(loop.call_later(self.settings.request_timeout_s, self._expire, run))
        # The server must know the subscription before the work goes out, or the first events could be lost.
        await self.bus.flush()
        with run.activate():
            # Acked at once by a replica; nobody listening fails the request now, not at its deadline.
            await self.bus.request(
                subject,
                work,
                WorkAccepted,
                timeout=FORWARD_ACK_S,
                rid=run.rid,
                tenant=run.tenant,
                deadline_ms=deadline_ms,
            )

    # ---- events ----------------------------------------------------------------------------

    async def _hear_steps(self) -> None:
        async with self._steps_made:
            if self._steps_sub is None:
                subject = subjects.chat_steps_to(self.bus.replica)
                self._steps_sub = await self.bus.watch_frames(subject, decode_chat_step, self._on_step)

    async def _on_step(self, step: list[ChatFrame] | ChatEvent) -> None:
        """One safety_out pass's text for the runs relayed here (or one run's end): each to its run."""
        by_rid = self.by_rid
        if isinstance(step, ChatEvent):
            run = by_rid.get(step.rid)
            if run is not None:
                # Ending settles the run's limits in their store: the other runs' text does not wait for it.
                self._spawn(self._receive(run, step))
            return
        for frame in step:
            run = by_rid.get(frame.rid)
            if run is not None:
                self._take(run, chat_frame_event(frame))  # text never ends a run

    async def _receive(self, run: Run, event: ChatEvent) -> None:
        if self._take(run, event):
            await self._end(run, event)

    def _take(self, run: Run, event: ChatEvent) -> bool:
        """Everything an event does to a live run but ending it: True when it ends the run."""
        if not run.live:
            return False
        if event.type == "holder":
            run.holder.took(event.stage or "", event.replica or "")
            return False
        run.holder.heard()
        if event.type == "prompt":  # what the engine knows on starting; the protocols' encoders read it
            run.prompt_tokens = event.usage.prompt_tokens if event.usage is not None else None
            run.system_fingerprint = event.system_fingerprint
            return False
        if run.cancel_reason in CLIENT_STOPS and event.type in ("delta", "thinking"):
            return False  # in flight behind the client's Stop: it is not shown, so it is not saved either
        if run.first_token_s is None and event.type in ("delta", "thinking") and event.text:
            # Relayed to the client as it arrives; a tool result, a refusal or an error is no first token.
            run.first_token_s = time.perf_counter() - run.t0
            self.metrics.ttft.labels(run.api).observe(run.first_token_s)
        if event.type in TERMINAL:
            return True
        run.push(event)
        return False

    async def _run_hooks(self, run: Run) -> None:
        for hook in run.on_finish:
            try:
                await hook(run)
            except Exception:
                log.exception("finish hook failed", rid=run.rid)

    async def _end(self, run: Run, event: ChatEvent, *, ours: bool = False, settle_later: bool = False) -> None:
        """The one way a launched run ends. Settle the request (limits) before the client sees the last
        event: a client that sends its next request the moment it gets `done` must find its stream lease
        already returned.

        `ours`: the gateway made this event (deadline, Stop without an answer, holder lost, shutdown); it
        goes on the bus too, so a replica replaying the stream sees the same ending. `settle_later`: the
        bus is away, and settling (which writes to its key-value store) would hold the client's ending
        for as long; it runs after the ending instead, once the bus is back."""
        if not run.live:
            return
        run.to(Phase.ending)
        run.last = event
        if ours:
            try:
                await self.bus.publish(subjects.chat_events(run.rid), event, rid=run.rid, tenant=run.tenant)
            except Exception as e:
                log.warning("last event not published", rid=run.rid, error=str(e))
        if settle_later:
            self._spawn(self._run_hooks_once_connected(run))
        else:
            await self._run_hooks(run)
        run.push(event)
        run.to(Phase.ended)
        self._spawn(self._close(run))

    async def _holder_lost(self, rid: str, stage: str, replica: str, why: str) -> None:
        """The process holding the run died, or what it sent on was lost: end it now, keeping what the
        client already has."""
        run = self.by_rid.get(rid)
        if run is None or not run.live:
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
            # Asked again while context (or the bus) is away, within the bound; idempotent on the rid.
            await request_until(
                self.bus,
                subjects.SAVE_TURN,
                SaveTurn(tenant=work.tenant, user=work.user, chat_id=work.chat_id, turn=turn),
                SaveTurnAck,
                bound_s=self.settings.save_timeout_s,
            )
        except Exception as e:
            log.warning("partial answer not saved", rid=run.rid, error=str(e))

    # ---- the bus going away ----------------------------------------------------------------

    async def _connection_changed(self, up: bool) -> None:
        if up:
            self._bus_up.set()
        else:
            self._bus_up.clear()
        if self._bus_lost is not None:
            self._bus_lost.cancel()
            self._bus_lost = None
        if not up:
            # A blip (a cluster client moving to another node) reconnects within this; a dead server does not.
            loop = asyncio.get_running_loop()
            self._bus_lost = loop.call_later(self.settings.bus_lost_after_s, self._spawn_bus_lost)

    def _spawn_bus_lost(self) -> None:
        self._bus_lost = None
        if not self.bus.connected:
            self._spawn(self._end_for_bus_loss())

    async def _run_hooks_once_connected(self, run: Run) -> None:
        """Settle (limits, budget) once the bus is back, within the save's bound: settled while it is away,
        the writes would fail and a budget's reservation would stay spent."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._bus_up.wait(), self.settings.save_timeout_s)
        await self._run_hooks(run)

    async def _end_for_bus_loss(self) -> None:
        """The bus is gone: no more of any answer can arrive until it is back. End every live run now with a
        clean error (the client keeps its partial answer), and store what each client was shown once the
        bus is back: saving and settling wait for the bus, the client does not."""
        info = ErrorInfo.of(ErrorCode.unavailable, "the message bus went away mid-answer; the partial answer is kept")
        for run in [r for r in self.by_rid.values() if r.live]:
            self.metrics.cancels.labels("bus_lost").inc()
            run.span.add_event("bus_lost")
            await self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True, settle_later=True)
            self._spawn(self._publish_cancel(run, "bus_lost"))
            self._spawn(self._save_relayed(run))

    def _expire(self, run: Run) -> None:
        if not run.live:
            return
        info = ErrorInfo.of(ErrorCode.deadline_exceeded, f"no answer within {self.settings.request_timeout_s:g}s")
        self._spawn(self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True))
        self._spawn(self._publish_cancel(run, "deadline_exceeded"))

    async def _publish_cancel(self, run: Run, reason: str) -> None:
        self.metrics.cancels.labels(reason).inc()
        delivered = None
        if reason in (*CLIENT_STOPS, "bus_lost"):  # the stored answer is cut to what the client was shown
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
        if run.phase is not Phase.running:
            return
        run.to(Phase.cancelling)
        run.cancel_reason = reason
        run.span.add_event("cancel", {"reason": reason})
        await self._publish_cancel(run, reason)
        loop = asyncio.get_running_loop()
        run.timers.append(loop.call_later(self.settings.cancel_wait_s, self._cancel_timeout, run))

    def _cancel_timeout(self, run: Run) -> None:
        done = ChatEvent(rid=run.rid, type="done", finish_reason="cancelled", usage=Usage())
        self._spawn(self._end(run, done, ours=True))

    # ---- readers ---------------------------------------------------------------------------

    def attach(self, run: Run) -> None:
        run.readers += 1

    def detach(self, run: Run, completed: bool) -> None:
        """Synchronous on purpose: it runs in `finally` of a response the server may be cancelling."""
        run.readers -= 1
        if completed or run.readers > 0 or run.phase is not Phase.running:
            return
        grace = self.settings.resume_grace_s
        if grace <= 0:
            self._spawn(self.cancel(run, "client_disconnected"))
            return

        def later() -> None:
            if run.readers == 0:
                self._spawn(self.cancel(run, "client_disconnected"))

        run.timers.append(asyncio.get_running_loop().call_later(grace, later))

    # ---- closing ---------------------------------------------------------------------------

    async def _close(self, run: Run) -> None:
        """After the last event: stop watching, then the span and the gateway's record, each made here only."""
        if run.phase is not Phase.ended:
            return
        run.to(Phase.closed)
        self.liveness.forget(run.rid)
        for timer in run.timers:
            timer.cancel()
        if run.sub is not None:
            with contextlib.suppress(Exception):
                await run.sub.unsubscribe()
        self.active -= 1
        self.metrics.active_streams.set(self.active)
        duration = time.perf_counter() - run.t0
        status = run.client_status
        self.metrics.stream_duration.labels(run.api, status).observe(duration)
        error = run.error
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
                    part=run.part(),
                )
            )
        run.span.end()
        run.timers = [asyncio.get_running_loop().call_later(self.settings.resume_ttl_s, self._forget, run.rid)]

    def _forget(self, rid: str) -> None:
        self.by_rid.pop(rid, None)

    async def close(self) -> None:
        """Shutdown: cancel what still runs so inference frees it, and record it."""
        await self.liveness.close()
        if self._steps_sub is not None:
            with contextlib.suppress(Exception):
                await self._steps_sub.unsubscribe()
            self._steps_sub = None
        for run in list(self.by_rid.values()):
            if run.live:
                await self.cancel(run, "gateway_shutdown")
                info = ErrorInfo.of(ErrorCode.unavailable, "gateway shutting down")
                await self._end(run, ChatEvent(rid=run.rid, type="error", error=info), ours=True)
            await self._close(run)
        for run in self.by_rid.values():
            for timer in run.timers:
                timer.cancel()
        self.by_rid.clear()
