"""Typed messaging over NATS.

Every message carries `traceparent`, `x-rid`, `x-deadline` and `x-tenant`. Handlers are plain async
functions, typed model in and typed model out; the bus decodes and validates, binds `rid`/`trace_id`
into structlog contextvars, opens a consumer span, drops expired work with `deadline_exceeded`, and
turns exceptions into error replies (or `error` chat events for pipeline stages).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import nats
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel, ValidationError

from switchyard.libs.bus import headers as H
from switchyard.libs.bus.kv import TypedKV, open_bucket
from switchyard.libs.bus.parts import HEADROOM, Joiner, split
from switchyard.libs.telemetry import Telemetry
from switchyard.schemas import ChatEvent, ErrorCode, ErrorInfo, Forward, StageRecord, Work, WorkAccepted, subjects

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
F = TypeVar("F")  # a decoded frame (switchyard/schemas/frames.py): a msgspec struct or a model
log = structlog.get_logger()
# An accepting stage acks before it starts the work, so this only has to cover a busy event loop.
FORWARD_ACK_S = 5.0
# A durable publish is tried again for this long: in a 3-node cluster on loopback, a stream whose
# leader's node died had a new leader after about 6 s.
DURABLE_ACK_S = 5.0
DURABLE_RETRY_S = 20.0
RECONNECT_WAIT_S = 0.5
_UNACKED = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)


class BusError(Exception):
    """An error with a code from the contract; crosses the bus as an error reply or event."""

    def __init__(self, code: ErrorCode, message: str, decision: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        # What the stage decided before failing (e.g. the verdicts behind a block), for the record.
        self.decision = decision or {}

    def info(self) -> ErrorInfo:
        return ErrorInfo.of(self.code, self.message)


class NobodyListens(BusError):
    """No process is subscribed to the subject: the replica asked for is gone."""


class NoAnswer(BusError):
    """A request went unanswered in time: the responder is slow, or the bus is away (reconnecting)."""


@dataclass(frozen=True)
class MsgContext:
    rid: str = ""
    tenant: str = ""
    deadline_ms: int | None = None
    subject: str = ""
    reply: str = ""  # where a request's answer goes ('' for a plain publish)

    def expired(self) -> bool:
        return self.deadline_ms is not None and H.now_ms() > self.deadline_ms


_current: contextvars.ContextVar[MsgContext] = contextvars.ContextVar("switchyard_msg", default=MsgContext())


def current_context() -> MsgContext:
    return _current.get()


@dataclass
class _Handled:
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class Bus:
    def __init__(self, nc: NATS, service: str, replica: str, telemetry: Telemetry, js_replicas: int = 1):
        self.nc = nc
        # Set by `close`: the connection going away then is ours, not a loss for the listeners to handle.
        self.closing = False
        # How many servers keep each JetStream stream and bucket this bus creates: 3 in a cluster, so
        # the log and the registries outlive a node.
        self.js_replicas = js_replicas
        self.js: JetStreamContext = nc.jetstream()
        self.service = service
        self.replica = replica
        self.telemetry = telemetry
        self.tracer = telemetry.tracer()
        self._subs: list[Any] = []
        self._kvs: list[TypedKV[Any]] = []
        self._inflight = _Handled()
        # Requests this process holds now (liveness probes ask; see switchyard/libs/bus/liveness.py).
        self.held: set[str] = set()
        # Called with False when the connection to the server is lost, True when it is back (nats-py
        # reconnects by itself and re-subscribes; these are for what a process must do beyond that).
        self.connection_listeners: list[Callable[[bool], Awaitable[None]]] = []

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    def on_reconnect(self, redo: Callable[[], Awaitable[None]]) -> None:
        """Run `redo` each time the connection is back: what a restarted server may have lost (a memory
        stream) is made again."""

        async def listener(up: bool) -> None:
            if up:
                await redo()

        self.connection_listeners.append(listener)

    async def _connection_changed(self, up: bool) -> None:
        """nats-py awaits this in its reconnect loop: the listeners run as tasks of their own, so one that
        talks to the server (which needs that loop) cannot stall it."""
        if self.closing:
            return
        log.warning("bus reconnected" if up else "bus connection lost")

        async def call(listener: Callable[[bool], Awaitable[None]]) -> None:
            try:
                await listener(up)
            except Exception:
                log.exception("connection listener failed")

        for listener in list(self.connection_listeners):
            task = asyncio.create_task(call(listener))
            self._inflight.tasks.add(task)
            task.add_done_callback(self._inflight.tasks.discard)

    @classmethod
    async def connect(cls, url: str, service: str, replica: str, telemetry: Telemetry, js_replicas: int = 1) -> Bus:
        # `url` may list a cluster's servers, comma-separated; nats-py wants them as a list.
        servers = [u.strip() for u in url.split(",") if u.strip()]
        made: list[Bus] = []

        async def disconnected() -> None:
            if made:
                await made[0]._connection_changed(False)

        async def reconnected() -> None:
            if made:
                await made[0]._connection_changed(True)

        # Reconnect forever, every RECONNECT_WAIT_S: a restarted server (same port, same store) is found
        # within that, and nats-py then re-subscribes everything this process had. A bounded drain:
        # shutdown waits for in-flight work (quiesce), not for idle subscriptions.
        nc = await nats.connect(
            servers,
            name=f"{service}-{replica}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT_S,
            drain_timeout=5,
            disconnected_cb=disconnected,
            reconnected_cb=reconnected,
        )
        made.append(cls(nc, service, replica, telemetry, js_replicas))
        return made[0]

    # ---- headers -------------------------------------------------------------------------

    def _headers(self, rid: str | None, tenant: str | None, deadline_ms: int | None) -> dict[str, str]:
        ctx = _current.get()
        hdrs: dict[str, str] = {}
        H.inject_trace(hdrs)
        hdrs[H.RID] = rid if rid is not None else ctx.rid
        hdrs[H.TENANT] = tenant if tenant is not None else ctx.tenant
        dl = deadline_ms if deadline_ms is not None else ctx.deadline_ms
        if dl is not None:
            hdrs[H.DEADLINE] = str(dl)
        return hdrs

    # ---- sending -------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        msg: BaseModel,
        *,
        rid: str | None = None,
        tenant: str | None = None,
        deadline_ms: int | None = None,
    ) -> None:
        data, headers = msg.model_dump_json().encode(), self._headers(rid, tenant, deadline_ms)
        parts = split(data, self.nc.max_payload)
        if len(parts) == 1:
            await self.nc.publish(subject, data, headers=headers)
            return
        for i, part in enumerate(parts, 1):  # in order on one connection: readers join them (parts.py)
            await self.nc.publish(subject, part, headers={**headers, H.PART: f"{i}/{len(parts)}"})

    async def request(
        self,
        subject: str,
        msg: BaseModel,
        reply_type: type[R],
        *,
        timeout: float = 5.0,
        rid: str | None = None,
        tenant: str | None = None,
        deadline_ms: int | None = None,
    ) -> R:
        try:
            reply = await self.nc.request(
                subject,
                msg.model_dump_json().encode(),
                timeout=timeout,
                headers=self._headers(rid, tenant, deadline_ms),
            )
        except nats.errors.NoRespondersError as e:
            raise NobodyListens(ErrorCode.unavailable, f"no service answers on {subject}") from e
        except nats.errors.TimeoutError as e:
            raise NoAnswer(ErrorCode.unavailable, f"{subject} did not answer within {timeout}s") from e
        if (reply.headers or {}).get(H.STATUS) == "error":
            info = ErrorInfo.model_validate_json(reply.data)
            raise BusError(info.code, info.message)
        return reply_type.model_validate_json(reply.data)

    @property
    def max_frame_bytes(self) -> int:
        """The most a frame message may hold: `publish_frame` does not split (only `publish` does)."""
        return max(1, self.nc.max_payload - HEADROOM)

    async def publish_frame(self, subject: str, data: bytes) -> None:
        """A per-token frame (switchyard/schemas/frames.py): its bytes as they are, no headers (the hot path)."""
        await self.nc.publish(subject, data)

    async def publish_marker(self, subject: str, headers: dict[str, str]) -> None:
        """An empty message whose headers are the content (ownership markers kept by JetStream)."""
        await self.nc.publish(subject, b"", headers=headers)

    async def watch(self, subject: str, model: type[M], handler: Callable[[M], Awaitable[None]]) -> Any:
        """A per-request subscription: not tracked for drain and no span per message (one stream's
        deltas would bury the trace); undecodable messages are logged and skipped. Returns the
        subscription; end it with `await sub.unsubscribe()`."""
        return await self.watch_frames(subject, model.model_validate_json, handler)

    async def watch_frames(
        self, subject: str, decode: Callable[[bytes], F], handler: Callable[[F], Awaitable[None]]
    ) -> Any:
        """Like `watch`, for a per-token or per-step subject (a wildcard may match several, one publisher
        each): `decode` (from switchyard/schemas/frames.py) reads each message, in order; what does not decode
        is logged and skipped."""

        joiners: dict[str, Joiner] = {}  # parts are consecutive per subject, not across a wildcard's subjects

        async def on_msg(msg: Msg) -> None:
            try:
                hdrs = msg.headers
                data = joiners.setdefault(msg.subject, Joiner()).add(msg.data, hdrs) if hdrs else msg.data
                if data is None:
                    return
                item = decode(data)
            except ValueError:
                log.warning("undecodable frame", subject=msg.subject)
                return
            await handler(item)

        return await self.nc.subscribe(subject, cb=on_msg)

    @contextlib.contextmanager
    def bound(self, ctx: MsgContext) -> Iterator[None]:
        """Send as part of the request `ctx` names: what this process sends meanwhile (and any task or
        subscription made meanwhile, which copies the context) carries its rid, tenant and deadline."""
        token = _current.set(ctx)
        try:
            yield
        finally:
            _current.reset(token)

    async def flush(self) -> None:
        """Make the server register subscriptions made so far before anything that depends on them.

        nats-py's own flush() is not enough: it writes its PING straight to the socket while
        earlier commands (a SUB) may still wait in its pending buffer for the flusher task, so the
        PONG can come back before the server has seen the SUB, and another connection's request
        then gets "no responders" (about 1 time in 10 here). So first let the flusher task write
        the buffer (it runs on the next loop turn; bounded, in case the connection stalls)."""
        for _ in range(1000):
            if not (self.nc.pending_data_size and self.nc.is_connected):
                break
            await asyncio.sleep(0)
        await self.nc.flush()

    async def publish_durable(self, subject: str, msg: BaseModel, msg_id: str) -> None:
        """Acknowledged JetStream publish, de-duplicated by `Nats-Msg-Id`: a logger that is down loses nothing.

        Unacknowledged (the server it went to died with it, or the stream is electing a new leader in
        a cluster), it is sent again under the same id, which JetStream keeps once."""
        hdrs = self._headers(None, None, None)
        hdrs[H.MSG_ID] = msg_id
        data = msg.model_dump_json().encode()
        give_up, pause = time.monotonic() + DURABLE_RETRY_S, 0.25
        while True:
            try:
                await self.js.publish(subject, data, headers=hdrs, timeout=DURABLE_ACK_S)
                return
            except _UNACKED:
                if time.monotonic() + pause >= give_up:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    async def ensure_log_stream(self) -> None:
        cfg = StreamConfig(
            name=subjects.LOG_STREAM,
            subjects=[subjects.LOG_SUBJECTS],
            max_age=7 * 24 * 3600.0,
            duplicate_window=120.0,
            num_replicas=self.js_replicas,
        )
        try:
            await self.js.add_stream(cfg)
        except nats.js.errors.BadRequestError:
            await self.js.update_stream(cfg)

    async def log_stage(self, record: StageRecord) -> None:
        record.replica = record.replica or self.replica
        span = trace.get_current_span().get_span_context()
        if span.is_valid and not record.trace_id:
            record.trace_id = format(span.trace_id, "032x")
        try:
            await self.publish_durable(subjects.log_stage(record.stage), record, f"{record.rid}:{record.stage}")
        except Exception as e:  # logging must never fail the request it describes
            log.warning("stage record not published", error=str(e))

    async def emit(self, event: ChatEvent) -> None:
        await self.publish(subjects.chat_events(event.rid), event, rid=event.rid)

    # ---- receiving -----------------------------------------------------------------------

    async def subscribe(
        self,
        subject: str,
        model: type[M],
        handler: Callable[[M], Awaitable[BaseModel | None]],
        *,
        queue: str | None = None,
        ordered: bool = False,
        span: bool = True,
    ) -> Any:
        """Register `handler`. Requests (messages with a reply subject) get the returned model or an error.

        `ordered` handles messages one at a time in arrival order (a stream of deltas); otherwise each
        message runs in its own task so a slow one never holds up the next.
        """

        async def on_msg(msg: Msg) -> None:
            if ordered:
                await self._dispatch(msg, model, handler, span)
                return
            task = asyncio.create_task(self._dispatch(msg, model, handler, span))
            self._inflight.tasks.add(task)
            task.add_done_callback(self._inflight.tasks.discard)

        sub = await self.nc.subscribe(subject, queue=queue or "", cb=on_msg)
        self._subs.append(sub)
        return sub

    async def kv(self, bucket: str, model: type[M], ttl_s: float | None = None) -> TypedKV[M]:
        kv = TypedKV(await open_bucket(self.js, bucket, ttl_s, self.js_replicas), model, self.js, bucket)
        self._kvs.append(kv)
        return kv

    async def unsubscribe(self, sub: Any) -> None:
        if sub in self._subs:
            self._subs.remove(sub)
        try:
            await sub.unsubscribe()
        except Exception:  # already gone with a closed connection
            pass

    async def stage(self, subject: str, handler: Callable[[Work], Awaitable[Forward]]) -> None:
        """A pipeline stage: Work in, Forward out; the bus forwards, records the stage and reports failure."""

        async def run(work: Work) -> None:
            try:
                await work_on(work)
            finally:
                self.release(work.rid)

        async def work_on(work: Work) -> None:
            t0, started = time.perf_counter(), H.now_ms()
            structlog.contextvars.bind_contextvars(chat_id=work.chat_id)
            # Held before the ack: once the sender lets go, a probe finds the request held here.
            await self.hold(work.rid)
            # Ack the hand-over before the work: the sender learns at once whether anyone took it.
            await self.ack(WorkAccepted(rid=work.rid, replica=self.replica))
            try:
                fwd = await handler(work)
                await self._forward(fwd)
            except Exception as e:
                err = e if isinstance(e, BusError) else BusError(ErrorCode.internal, f"{self.service} failed: {e}")
                if not isinstance(e, BusError):
                    log.exception("stage failed")
                await self.emit(ChatEvent(rid=work.rid, type="error", error=err.info()))
                await self.log_stage(
                    StageRecord(
                        rid=work.rid,
                        stage=self.service,
                        tenant=work.tenant,
                        started_ms=started,
                        duration_ms=(time.perf_counter() - t0) * 1000,
                        status="error",
                        error=err.info(),
                        decision=err.decision,
                    )
                )
                return
            await self.log_stage(
                StageRecord(
                    rid=work.rid,
                    stage=self.service,
                    tenant=work.tenant,
                    started_ms=started,
                    duration_ms=(time.perf_counter() - t0) * 1000,
                    decision=fwd.decision,
                    part=fwd.part,
                )
            )

        await self.subscribe(subject, Work, run_none(run), queue=self.service)

    async def ack(self, accepted: BaseModel) -> None:
        """Answer the current request now, before its handler is done (its later result is not sent)."""
        ctx = _current.get()
        if ctx.reply:
            await self.nc.publish(
                ctx.reply, accepted.model_dump_json().encode(), headers=self._headers(None, None, None)
            )
            _current.set(replace(ctx, reply=""))

    async def hold(self, rid: str) -> None:
        """Tell the gateway this process now holds `rid`: if it dies, the gateway finds out by asking."""
        self.held.add(rid)
        await self.emit(ChatEvent(rid=rid, type="holder", stage=self.service, replica=self.replica))

    def release(self, rid: str) -> None:
        """This process is done with `rid` (handed on, or ended): a probe now hears it is not held here."""
        self.held.discard(rid)

    async def _forward(self, fwd: Forward) -> None:
        if not fwd.ack:
            await self.publish(fwd.subject, fwd.work)
            return
        try:
            await self.request(fwd.subject, fwd.work, WorkAccepted, timeout=FORWARD_ACK_S)
        except NobodyListens:
            # Certain and immediate (unlike a timeout, after which the replica may still take the work).
            if fwd.fallback is None:
                raise
            log.warning("next stage gone, failing over", subject=fwd.subject, fallback=fwd.fallback)
            await self.request(fwd.fallback, fwd.work, WorkAccepted, timeout=FORWARD_ACK_S)

    async def _dispatch(
        self, msg: Msg, model: type[M], handler: Callable[[M], Awaitable[BaseModel | None]], with_span: bool
    ) -> None:
        hdrs = dict(msg.headers or {})
        dl = hdrs.get(H.DEADLINE)
        ctx = MsgContext(
            rid=hdrs.get(H.RID, ""),
            tenant=hdrs.get(H.TENANT, ""),
            deadline_ms=int(dl) if dl else None,
            subject=msg.subject,
            reply=msg.reply or "",
        )
        token = _current.set(ctx)
        otel_token = otel_context.attach(H.extract_trace(hdrs))
        structlog.contextvars.bind_contextvars(rid=ctx.rid, subject=msg.subject)
        try:
            if with_span:
                with self.tracer.start_as_current_span(
                    f"process {subjects.template(msg.subject)}",
                    kind=SpanKind.CONSUMER,
                    attributes={
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                        "messaging.destination.name": msg.subject,
                        "switchyard.rid": ctx.rid,
                        "switchyard.service": self.service,
                    },
                ) as span:
                    await self._handle(msg, ctx, model, handler, span)
            else:
                await self._handle(msg, ctx, model, handler, None)
        finally:
            structlog.contextvars.unbind_contextvars("rid", "subject", "chat_id")
            otel_context.detach(otel_token)
            _current.reset(token)

    async def _handle(
        self,
        msg: Msg,
        ctx: MsgContext,
        model: type[M],
        handler: Callable[[M], Awaitable[BaseModel | None]],
        span: trace.Span | None,
    ) -> None:
        try:
            if ctx.expired():
                raise BusError(ErrorCode.deadline_exceeded, f"work for {msg.subject} arrived after its deadline")
            try:
                data = model.model_validate_json(msg.data)
            except ValidationError as e:
                raise BusError(ErrorCode.bad_request, f"invalid {model.__name__}: {e.errors()[:3]}") from e
            result = await handler(data)
            if _current.get().reply and result is not None:
                await self.nc.publish(
                    msg.reply, result.model_dump_json().encode(), headers=self._headers(None, None, None)
                )
        except Exception as e:
            err = e if isinstance(e, BusError) else BusError(ErrorCode.internal, f"{self.service}: {e}")
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, err.message))
            if not isinstance(e, BusError):
                log.exception("handler failed")
            else:
                log.info("handler error", code=err.code, error=err.message)
            reply = _current.get().reply  # '' once the handler acked the hand-over
            if reply:
                await self.nc.publish(
                    reply, err.info().model_dump_json().encode(), headers={H.STATUS: "error", H.RID: ctx.rid}
                )
            elif (
                err.code == ErrorCode.deadline_exceeded and ctx.rid and msg.subject.startswith(subjects.PIPELINE_PREFIX)
            ):
                await self.emit(ChatEvent(rid=ctx.rid, type="error", error=err.info()))

    # ---- lifecycle -----------------------------------------------------------------------

    async def quiesce(self, timeout: float = 10.0) -> None:
        """Stop taking work and let in-flight handlers finish; the connection stays up for flushing."""
        for kv in self._kvs:
            await kv.close()
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        if self._inflight.tasks:
            await asyncio.wait(list(self._inflight.tasks), timeout=timeout)

    async def close(self) -> None:
        self.closing = True
        try:
            await self.nc.drain()
        except Exception:
            pass

    async def drain(self, timeout: float = 10.0) -> None:
        await self.quiesce(timeout)
        await self.close()


def run_none(fn: Callable[[Work], Awaitable[None]]) -> Callable[[Work], Awaitable[BaseModel | None]]:
    async def wrapped(w: Work) -> BaseModel | None:
        await fn(w)
        return None

    return wrapped


def stable_id(*parts: str) -> str:
    return hashlib.sha1(":".join(parts).encode()).hexdigest()[:16]
