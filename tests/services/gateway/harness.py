"""Test harness: a scripted pipeline at the bus seam, and gateways served by uvicorn on free ports.

The responder stands in for every downstream stage: it takes the work from `pipeline.context` and
plays a script chosen by the user's text, answers the conversation and admin subjects, and answers
health checks for the stages a test lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from opentelemetry import trace

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.bus.embedded import free_port
from switchyard.libs.store.keys import KeyStore
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import (
    CancelNotice,
    ChatEvent,
    ConversationQuery,
    ConversationReply,
    ErrorCode,
    ErrorInfo,
    HealthReply,
    HealthRequest,
    RequestQuery,
    RequestRecordReply,
    SpanRecord,
    ToolEvent,
    Turn,
    Usage,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.schemas.frames import encode_chat_frame, encode_text, join_step
from switchyard.services.gateway.app import create_app
from switchyard.services.gateway.runs.resume import ensure_events_stream
from switchyard.services.gateway.settings import GatewaySettings, TierLimits
from tests.wait import wait_for

USAGE = Usage(prompt_tokens=42, cached_tokens=16, completion_tokens=3, ttft_ms=12.5, tpot_ms=4.0)
# What inference reports on taking a request (its `prompt` event): the engine build.
FINGERPRINT = "harness-1.0-0123456789ab"


@dataclass
class Responder:
    bus: Bus
    works: list[Work] = field(default_factory=list)
    cancels: list[CancelNotice] = field(default_factory=list)
    opened: list[ConversationQuery] = field(default_factory=list)
    healthy: set[str] = field(default_factory=set)
    cancelled: dict[str, asyncio.Event] = field(default_factory=dict)
    cancel_seen: asyncio.Event = field(default_factory=asyncio.Event)
    trace_ids: dict[str, str] = field(default_factory=dict)

    async def emit(self, rid: str, **kw: object) -> None:
        await self.bus.emit(ChatEvent.model_validate({"rid": rid, **kw}))

    async def relay(self, work: Work, *events: dict[str, object]) -> None:
        """Text and the end as safety_out sends them to the gateway replica the work names: one `chat.steps`
        message for the text of one pass, the end after it; each also kept on `chat.events.<rid>.kept`."""
        assert work.relay, "the gateway names itself as the relay"
        steps, kept = subjects.chat_steps(work.relay, "harness"), subjects.chat_events_kept(work.rid)
        frames = []
        for kw in events:
            event = ChatEvent.model_validate({"rid": work.rid, **kw})
            if event.type in ("delta", "thinking"):
                await self.bus.publish_frame(kept, encode_text(event.type, event.text))
                frames.append(encode_chat_frame(work.rid, event.type, event.text))
                continue
            if frames:
                await self.bus.publish_frame(steps, join_step(frames))
                frames = []
            await self.bus.publish(kept, event, rid=work.rid)
            await self.bus.publish(steps, event, rid=work.rid)
        if frames:
            await self.bus.publish_frame(steps, join_step(frames))

    async def take(self, work: Work) -> None:
        await self.bus.ack(WorkAccepted(rid=work.rid, replica="harness"))  # as a stage acks the hand-over
        await self.on_work(work)

    async def on_work(self, work: Work) -> None:
        self.works.append(work)
        rid = work.rid
        self.trace_ids[rid] = format(trace.get_current_span().get_span_context().trace_id, "032x")
        self.cancelled[rid] = asyncio.Event()
        text = work.text
        if text.startswith("fail"):
            info = ErrorInfo.of(ErrorCode.policy_violation, "blocked by policy")
            await self.emit(rid, type="error", error=info.model_dump())
            return
        if text.startswith("silent"):
            return  # never answers: the deadline must end it
        if text.startswith("hang"):
            await self.emit(rid, type="delta", text="partial")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cancelled[rid].wait(), 20)
            await self.emit(rid, type="done", finish_reason="cancelled", usage=USAGE.model_dump())
            return
        if text.startswith("blockone") and rid.endswith("-1"):  # of several answers, output safety stops one
            await self.emit(rid, type="delta", text="Hel")
            info = ErrorInfo.of(ErrorCode.content_blocked, "stopped by output check")
            await self.emit(rid, type="error", error=info.model_dump(), usage=USAGE.model_dump())
            return
        if text.startswith("midfail"):
            await self.emit(rid, type="delta", text="Hel")
            info = ErrorInfo.of(ErrorCode.content_blocked, "stopped by output check")
            await self.emit(rid, type="error", error=info.model_dump())
            return
        if text.startswith("slow"):
            for i in range(6):
                await self.relay(work, {"type": "delta", "text": f"s{i} "})
                await asyncio.sleep(0.3)
            await self.relay(work, {"type": "done", "finish_reason": "stop", "usage": USAGE.model_dump()})
            return
        if text.startswith("call"):  # the answer is a call of the client's function
            call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
            await self.emit(rid, type="delta", text=call)
            await self.emit(rid, type="done", finish_reason="stop", usage=USAGE.model_dump(), model=work.model)
            return
        if text.startswith("cut"):  # the answer reaches max_tokens
            await self.emit(rid, type="delta", text="Hel")
            await self.emit(rid, type="done", finish_reason="length", usage=USAGE.model_dump(), model=work.model)
            return
        tool = ToolEvent(id="t1", name="orders.lookup", arguments={"id": 7}, status="ok", output="shipped")
        await self.emit(rid, type="tool", tool=tool.model_dump())
        # As inference does on taking the request, before its first text.
        await self.emit(
            rid, type="prompt", usage={"prompt_tokens": USAGE.prompt_tokens}, system_fingerprint=FINGERPRINT
        )
        # The answer as safety_out relays it: one pass's text, then the end.
        await self.relay(
            work,
            {"type": "thinking", "text": "thinking..."},
            {"type": "delta", "text": "Hel"},
            {"type": "delta", "text": "lo"},
            {"type": "done", "finish_reason": "stop", "usage": USAGE.model_dump(), "model": work.model},
        )

    async def on_cancel(self, notice: CancelNotice) -> None:
        self.cancels.append(notice)
        self.cancel_seen.set()
        ev = self.cancelled.get(notice.rid)
        if ev is not None:
            ev.set()

    async def on_open(self, q: ConversationQuery) -> ConversationReply:
        self.opened.append(q)
        if q.chat_id.startswith("other-"):
            raise BusError(ErrorCode.not_found, "no such chat")
        return ConversationReply(chat_id=q.chat_id)

    async def on_get(self, q: ConversationQuery) -> ConversationReply:
        if q.chat_id.startswith("other-"):
            raise BusError(ErrorCode.not_found, "no such chat")
        turn = Turn(id="t1", rid="r1", user_text="hi", answer="Hello", status="complete", usage=USAGE)
        return ConversationReply(chat_id=q.chat_id, title="hi", turns=[turn])

    async def on_admin(self, q: RequestQuery) -> RequestRecordReply:
        spans = [
            SpanRecord(trace_id="a" * 32, span_id="1" * 16, name="POST /chat", service="gateway", start_ns=1, end_ns=9),
            SpanRecord(
                trace_id="a" * 32,
                span_id="2" * 16,
                parent_id="1" * 16,
                name="ctx",
                service="context",
                start_ns=2,
                end_ns=5,
            ),
            SpanRecord(
                trace_id="a" * 32,
                span_id="3" * 16,
                parent_id="f" * 16,
                name="orphan",
                service="tools",
                start_ns=3,
                end_ns=4,
            ),
        ]
        return RequestRecordReply(rid=q.rid, record={"gateway": {"status": "ok"}}, spans=spans)

    async def start(self) -> None:
        await self.bus.subscribe(subjects.CONTEXT, Work, self.take, queue="context")
        await self.bus.subscribe("chat.cancel.*", CancelNotice, self.on_cancel)
        await self.bus.subscribe(subjects.CONVERSATION_OPEN, ConversationQuery, self.on_open)
        await self.bus.subscribe(subjects.CONVERSATION_GET, ConversationQuery, self.on_get)
        await self.bus.subscribe(subjects.ADMIN_REQUEST_GET, RequestQuery, self.on_admin)
        for stage in subjects.STAGES:

            async def health(_: HealthRequest, stage: str = stage) -> HealthReply | None:
                if stage not in self.healthy:
                    await asyncio.sleep(2)  # silent: the prober (1.5 s) times out first
                return HealthReply(stage=stage, replica="r0")

            await self.bus.subscribe(subjects.health(stage), HealthRequest, health)
        await self.bus.flush()


async def connect(server: NatsServer, name: str) -> Bus:
    return await Bus.connect(server.url, name, uuid.uuid4().hex[:6], setup_tracing(name))


@dataclass
class Gateway:
    url: str
    app: FastAPI
    bus: Bus
    keys: KeyStore
    settings: GatewaySettings
    pro_key: str = ""
    free_key: str = ""
    admin_key: str = ""
    free_key_id: str = ""

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.pro_key}"}


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started, what="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def gateway(
    nats_server: NatsServer, data_dir: Path, keys: KeyStore | None = None, **overrides: object
) -> AsyncIterator[Gateway]:
    settings = GatewaySettings.model_validate(
        {
            "nats_url": nats_server.url,
            "data_dir": str(data_dir),
            "limits_bucket": f"lim_{uuid.uuid4().hex[:8]}",
            **overrides,
        }
    )
    own_keys = keys is None
    store = keys or await KeyStore.open(settings.db_url())
    bus = await connect(nats_server, "gateway")
    await bus.ensure_log_stream()
    await ensure_events_stream(bus, 60, 64 * 1024 * 1024)
    app = create_app(settings, bus, store)
    async with serve(app) as url:
        gw = Gateway(url=url, app=app, bus=bus, keys=store, settings=settings)
        try:
            yield gw
        finally:
            await app.state.gateway.runs.close()
    await bus.drain()
    if own_keys:
        await store.close()


def tiny_tiers() -> dict[str, TierLimits]:
    return {
        "free": TierLimits(requests_per_minute=3, tokens_per_minute=1_000_000, concurrent_streams=5),
        "pro": TierLimits(requests_per_minute=1000, tokens_per_minute=50, concurrent_streams=1),
    }
