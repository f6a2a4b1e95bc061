"""Serve an engine on `infer.<pool>.<replica>`: handshake with safety_out, stream, honour cancel."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import structlog
from opentelemetry.trace import SpanKind, Status, StatusCode

from libs.bus import Bus
from libs.bus.headers import now_ms
from libs.bus.kv import TypedKV
from libs.engine import AsyncEngine, EngineConfig, SamplingParams, create_engine
from schemas import (
    CancelNotice,
    ErrorCode,
    ErrorInfo,
    Heartbeat,
    RawChunk,
    StageRecord,
    StreamOpen,
    StreamOpenAck,
    Usage,
    Work,
    subjects,
)
from services.inference.metrics import EngineGauges, start_metrics_server
from services.inference.settings import InferenceSettings

log = structlog.get_logger()


class Inference:
    def __init__(self, bus: Bus, engine: AsyncEngine, settings: InferenceSettings):
        self.bus = bus
        self.engine = engine
        self.settings = settings
        self.key = f"{settings.pool}.{bus.replica}"
        # Cancels can overtake the work they cancel; remember recent ones so late work ends at once.
        self._cancelled: OrderedDict[str, None] = OrderedDict()

    async def cancel(self, notice: CancelNotice) -> None:
        self._cancelled[notice.rid] = None
        while len(self._cancelled) > 4096:
            self._cancelled.popitem(last=False)
        self.engine.cancel(notice.rid)

    async def handle(self, work: Work) -> None:
        t0, started = time.perf_counter(), now_ms()
        rid = work.rid
        # safety_out subscribes to stream.raw.<rid> before it answers, so no delta is published unheard.
        ack = await self.bus.request(subjects.SAFETY_OUT, StreamOpen(work=work), StreamOpenAck, timeout=5.0)
        raw = subjects.stream_raw(rid)
        s = work.sampling
        params = SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            seed=s.seed,
            max_tokens=s.max_tokens,
            stop=list(s.stop),
        )
        model = self.engine.model_name
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "switchyard",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": s.max_tokens,
            "gen_ai.request.temperature": s.temperature,
            "gen_ai.request.top_p": s.top_p,
            "switchyard.rid": rid,
            "switchyard.replica": self.bus.replica,
        }
        if s.seed is not None:
            attrs["gen_ai.request.seed"] = s.seed
        usage: Usage | None = None
        finish: str = "error"
        error: ErrorInfo | None = None
        seq = 0
        text_parts: list[str] = []
        final_text = ""
        with self.bus.tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs) as span:
            try:
                if rid in self._cancelled:
                    finish = "cancelled"
                else:
                    async for chunk in self.engine.generate(rid, work.prompt, params):
                        if seq == 0 and chunk.token_ids:
                            span.add_event("gen_ai.first_token", {"ttft_ms": (time.perf_counter() - t0) * 1000})
                        if chunk.finished:
                            finish = chunk.finish_reason or "stop"
                            if chunk.usage is not None:
                                u = chunk.usage
                                usage = Usage(
                                    prompt_tokens=u.prompt_tokens,
                                    cached_tokens=u.cached_tokens,
                                    completion_tokens=u.completion_tokens,
                                    ttft_ms=None if u.ttft_s is None else u.ttft_s * 1000,
                                    tpot_ms=None if u.tpot_s is None else u.tpot_s * 1000,
                                )
                            final_text = chunk.text
                            text_parts.append(chunk.text)
                            break
                        if chunk.text:
                            text_parts.append(chunk.text)
                            await self.bus.publish(raw, RawChunk(rid=rid, seq=seq, text=chunk.text))
                            seq += 1
            except Exception as e:
                log.exception("generation failed")
                error = ErrorInfo.of(ErrorCode.internal, f"generation failed: {e}")
                span.set_status(Status(StatusCode.ERROR, str(e)))
            usage = usage or Usage(prompt_tokens=work.prompt_tokens)
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": usage.completion_tokens,
                    "gen_ai.usage.cache_read_input_tokens": usage.cached_tokens,
                    "gen_ai.response.finish_reasons": [finish],
                    "gen_ai.response.model": model,
                }
            )
            await self.bus.publish(
                raw,
                RawChunk(
                    rid=rid, seq=seq, text=final_text, finished=True, finish_reason=finish, usage=usage, error=error
                ),
            )  # type: ignore[arg-type]
        await self.bus.log_stage(
            StageRecord(
                rid=rid,
                stage="inference",
                tenant=work.tenant,
                started_ms=started,
                duration_ms=(time.perf_counter() - t0) * 1000,
                status="error" if error else "ok",
                error=error,
                decision={
                    "finish_reason": finish,
                    "checker": ack.replica,
                    "completion_tokens": usage.completion_tokens,
                    "record": {
                        "model": model,
                        "replica": self.bus.replica,
                        "finish_reason": finish,
                        "usage": usage.model_dump(),
                        "sampling": s.model_dump(),
                        "prompt_tokens": usage.prompt_tokens,
                        "raw_output": "".join(text_parts),
                    },
                },
            )
        )

    async def heartbeat_forever(self, registry: TypedKV[Heartbeat]) -> None:
        while True:
            m = self.engine.metrics()
            beat = Heartbeat(
                replica=self.bus.replica,
                pool=self.settings.pool,
                model=self.engine.model_name,
                max_model_len=self.engine.max_model_len,
                running=m.running,
                waiting=m.waiting,
                ts_ms=now_ms(),
            )
            try:
                await registry.put(self.key, beat)
            except Exception as e:  # a reconnecting connection must not end the heartbeat
                log.warning("heartbeat failed", error=str(e))
            await asyncio.sleep(self.settings.heartbeat_s)


async def setup(bus: Bus, settings: InferenceSettings) -> Callable[[], Awaitable[None]] | None:
    engine = create_engine(
        EngineConfig(
            kind=settings.engine,
            model_path=settings.model_path,
            device=settings.device,
            dtype=settings.dtype,
            block_size=settings.block_size,
            num_blocks=settings.num_blocks,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enable_prefix_caching=settings.enable_prefix_caching,
            max_model_len=settings.max_model_len,
            cache_dir=f"{settings.data_dir}/cache/engine",
        )
    )
    await engine.start()
    service = Inference(bus, engine, settings)
    gauges = EngineGauges(engine)
    if settings.metrics_port is not None:
        start_metrics_server(settings.metrics_port)
    # One subscription for every cancel: it also catches cancels that overtake their work.
    await bus.subscribe("chat.cancel.*", CancelNotice, service.cancel, span=False)
    await bus.subscribe(subjects.infer(settings.pool, bus.replica), Work, service.handle)
    registry = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
    hb = asyncio.create_task(service.heartbeat_forever(registry))
    gauges.start()

    async def cleanup() -> None:
        hb.cancel()
        # Leave the registry at once, so routers move this replica's conversations now, not at TTL.
        await registry.delete(service.key)
        gauges.stop()
        await engine.stop()

    return cleanup
