"""Serve an engine on `infer.<pool>.<replica>`: handshake with safety_out, stream per engine step, honour cancel."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from switchyard.libs.bus import Bus
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.bus.kv import TypedKV
from switchyard.libs.engine import AsyncEngine, SamplingParams, create_engine
from switchyard.libs.engine.types import ConstraintError, TokenLogprobs
from switchyard.libs.models.live import LiveModels
from switchyard.libs.plan import PlanError, plan_work
from switchyard.schemas import (
    CancelNotice,
    ChatEvent,
    ErrorCode,
    ErrorInfo,
    Heartbeat,
    InferencePart,
    RawChunk,
    RequestPlan,
    StageRecord,
    StreamOpen,
    StreamOpenAck,
    Usage,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.services.inference.fingerprint import system_fingerprint
from switchyard.services.inference.logprobs import to_openai
from switchyard.services.inference.mcp_rounds import McpRounds, Splitter, answer_with_mcp
from switchyard.services.inference.metrics import InferenceMetrics
from switchyard.services.inference.phases import (
    ANSWER_OPEN,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    answer_constraint,
    answer_request_id,
    params_of,
    tool_prefill,
)
from switchyard.services.inference.reasoning import ReasoningParser
from switchyard.services.inference.settings import InferenceSettings
from switchyard.services.inference.steps import StepOutbox

log = structlog.get_logger()


def served_name(model_path: str) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` is served as `SmolLM2-135M-Instruct`; a checkpoint directory by its
    name as it is (`Qwen2.5-0.5B-Instruct` keeps its dots)."""
    path = Path(model_path)
    return path.name if path.is_dir() else path.name.split(".")[0]


@dataclass
class Generation:
    """What one request produced so far; owned by its handler."""

    rid: str
    t0: float
    steps: str = ""  # stream.steps.<checker>.<producer>: where this stream's frames and end go
    seq: int = 0
    thinking: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    decode_s: float = 0.0
    reasoning_tokens: int = 0  # the thinking phase's share of completion_tokens
    finish: str = "error"
    logprobs: list[TokenLogprobs] = field(default_factory=list)  # the answer's tokens, when asked for
    # Every engine request of this generation is scheduled and cached as: the plan's priority, the tenant's salt.
    priority: int = 0
    cache_salt: str | None = None
    mcp: McpRounds = field(default_factory=McpRounds)  # the MCP calls the model wrote, when it was offered any

    def usage(self) -> Usage:
        tpot = self.decode_s / (self.completion_tokens - 1) if self.completion_tokens > 1 else None
        return Usage(
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            completion_tokens=self.completion_tokens,
            reasoning_tokens=self.reasoning_tokens,
            ttft_ms=None if self.ttft_s is None else self.ttft_s * 1000,
            tpot_ms=None if tpot is None else tpot * 1000,
        )


class Inference:
    def __init__(self, bus: Bus, engine: AsyncEngine, settings: InferenceSettings):
        self.bus = bus
        self.engine = engine
        self.settings = settings
        self.model = settings.model_name or served_name(settings.engine_env.resolved_model_path(settings.model_path))
        self.key = f"{settings.pool}.{bus.replica}"
        self.fingerprint = system_fingerprint(
            settings.engine, settings.engine_env.resolved_model_path(settings.model_path)
        )
        # Cancels can overtake the work they cancel; remember recent ones so late work ends at once.
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        self._running: set[asyncio.Task[None]] = set()
        # Every stream's frames of one engine step leave as one message per checker.
        self.outbox = StepOutbox(bus)

    async def cancel(self, notice: CancelNotice) -> None:
        self._cancelled[notice.rid] = None
        while len(self._cancelled) > 4096:
            self._cancelled.popitem(last=False)
        self.engine.cancel(notice.rid)
        self.engine.cancel(answer_request_id(notice.rid))

    async def _phase(
        self,
        gen: Generation,
        kind: str,
        request_id: str,
        prompt: str,
        params: SamplingParams,
        span: Span,
        first_phase: bool,
        split: Splitter | None = None,
    ) -> str:
        """Stream one engine request as `kind` chunks; returns the finish reason. With `split`, each chunk's
        text is parted into thinking and answer by it instead, and the request ends (finish reason
        'thinking_budget') where it says so."""
        finish = "error"
        first_ns: int | None = None
        ended = False  # `split` ended it: what the engine still sends is drained, not published
        # With logprobs asked for, each answer frame carries its tokens' entries; tokens whose text the
        # engine still holds (half a character, a possible stop string) go with the next frame's text.
        framed: list[TokenLogprobs] | None = [] if kind == "delta" and params.logprobs is not None else None
        params = dataclasses.replace(params, priority=gen.priority, cache_salt=gen.cache_salt)
        async for chunk in self.engine.generate(request_id, prompt, params):
            if first_ns is None:
                first_ns = time.time_ns()  # the span event sits where the first token came out, not at the end
            parts: list[tuple[str, str]] = []
            if not ended:
                if split is None:
                    parts = [(kind, chunk.text)] if chunk.text else []
                else:
                    got, ended = split(chunk.text, len(chunk.token_ids), chunk.finished)
                    parts = list(got)
                    if ended and not chunk.finished:
                        self.engine.cancel(request_id)
            # Logprobs are the answer's: a chunk that is all answer carries its tokens' entries.
            answer_only = bool(parts) and all(k == "delta" for k, _ in parts)
            if chunk.logprobs and kind == "delta" and (split is None or answer_only):
                gen.logprobs.extend(chunk.logprobs)
                if framed is not None:
                    framed.extend(chunk.logprobs)
            for part, text in parts:
                (gen.thinking if part == "thinking" else gen.answer).append(text)
                lps = None
                if framed is not None and part == "delta":
                    lps = [t.model_dump() for t in to_openai(self.engine.tokenizer, framed)]
                    framed.clear()
                # One frame per chunk: the engine merged what this stream made since the last one.
                n = len(chunk.token_ids) if len(parts) == 1 else 0
                self.outbox.frame(gen.steps, gen.rid, gen.seq, part, text, n, lps)  # type: ignore[arg-type]
                gen.seq += 1
            if chunk.finished:
                finish = "thinking_budget" if ended else (chunk.finish_reason or "stop")
                if chunk.usage is not None:
                    u = chunk.usage
                    gen.completion_tokens += u.completion_tokens
                    if kind == "thinking":
                        gen.reasoning_tokens += u.completion_tokens
                    if first_phase:
                        gen.prompt_tokens, gen.cached_tokens, gen.ttft_s = u.prompt_tokens, u.cached_tokens, u.ttft_s
                        if gen.ttft_s is not None:
                            span.add_event("gen_ai.first_token", {"ttft_ms": gen.ttft_s * 1000}, timestamp=first_ns)
                    elif gen.mcp.ran:
                        # A turn after an MCP call reads a new prompt (the calls and results): it is input too.
                        gen.prompt_tokens += u.prompt_tokens
                        gen.cached_tokens += u.cached_tokens
                    if u.tpot_s is not None:
                        gen.decode_s += u.tpot_s * max(u.completion_tokens - 1, 0)
                break
        return finish

    async def _answer(
        self,
        gen: Generation,
        work: Work,
        plan: RequestPlan,
        request_id: str,
        prompt: str,
        prefill: str,
        span: Span,
        first_phase: bool,
    ) -> str:
        """The answer after a thinking phase: within what is left of max_tokens, under the request's grammar,
        opened with a forced tool call's prefill."""
        left = plan.max_tokens - gen.completion_tokens
        if work.rid in self._cancelled:
            return "cancelled"
        if left <= 0:
            return "length"
        if prefill:
            gen.answer.append(prefill)
            self.outbox.frame(gen.steps, gen.rid, gen.seq, "delta", prefill, 0)
            gen.seq += 1
        stops = [TOOL_CALL_CLOSE] if work.client_tools and not work.parallel_tool_calls else []
        params = params_of(work.sampling, left, extra_stop=stops, constraint=answer_constraint(work, prefill))
        # The prefill spells client names (a forced function's, its first argument's): text, not markup.
        prompt += self.engine.tokenizer.literal(prefill)
        return await self._phase(gen, "delta", request_id, prompt, params, span, first_phase)

    async def _with_mcp(self, gen: Generation, work: Work, plan: RequestPlan, span: Span) -> str:
        """An answer that may call the MCP tools the request offers (`mcp_rounds.py`)."""

        def phase(
            request_id: str, prompt: str, params: SamplingParams, first: bool, split: Splitter | None
        ) -> Awaitable[str]:
            return self._phase(gen, "delta", request_id, prompt, params, span, first, split)

        return await answer_with_mcp(
            phase,
            self.bus,
            self.engine.tokenizer,
            self.engine.max_model_len,
            work,
            plan,
            used=lambda: gen.completion_tokens,
            cancelled=lambda: work.rid in self._cancelled,
            request_ids=(work.rid, answer_request_id(work.rid)),
            span=span,
            call_timeout_s=self.settings.mcp_call_timeout_s,
            out=gen.mcp,
        )

    async def _native(self, gen: Generation, work: Work, plan: RequestPlan, span: Span) -> str:
        """A model that thinks by itself: its text is split at its delimiters as it streams. When its thinking
        reaches the plan's budget, the request ends there and a second one continues from the prompt, the
        thinking and the close tag, so the model answers (its prompt is served from the prefix cache). A
        request with a grammar or a forced tool call also ends where the thinking does, and the answer is
        decoded under the grammar in the second request; otherwise the model answers in the first."""
        spec = plan.thinking_spec
        assert spec is not None  # native thinking is planned only for a card that says how the model thinks
        parser = ReasoningParser(spec.open, spec.close, started=work.prompt.rstrip().endswith(spec.open))
        prefill = tool_prefill(work.client_tools, work.tool_choice)
        constrained = bool(prefill) or answer_constraint(work, prefill) is not None
        raw: list[str] = []  # the engine's text as the model wrote it, for the continuation's prompt
        thought = 0

        def split(text: str, tokens: int, last: bool) -> tuple[list[tuple[str, str]], bool]:
            nonlocal thought
            was_thinking = parser.thinking
            raw.append(text)
            parts: list[tuple[str, str]] = list(parser.feed(text))
            if last:
                parts += parser.finish()
            if was_thinking:
                thought += tokens
            # A close tag the model has begun is let through: its few tokens end the thinking anyway.
            if parser.thinking and thought >= plan.thinking_budget and not (parser.holding and not last):
                parts += parser.finish()
                return parts, True
            if constrained and not parser.thinking:
                # The answer must be decoded under the grammar: drop the free answer and go on constrained.
                return [(k, t) for k, t in parts if k == "thinking"], True
            return parts, False

        stops = [TOOL_CALL_CLOSE] if work.client_tools and not work.parallel_tool_calls else []
        params = params_of(work.sampling, plan.max_tokens, extra_stop=[] if constrained else stops)
        finish = await self._phase(gen, "delta", work.rid, work.prompt, params, span, True, split)
        gen.reasoning_tokens += min(thought, gen.completion_tokens)
        if finish != "thinking_budget":
            return finish
        if work.rid in self._cancelled:
            return "cancelled"
        text = "".join(raw)
        at = text.find(spec.close)
        # The thinking as the model wrote it (open tag included); a model that answered without thinking gets
        # an empty thinking block, as its template writes one when thinking is off.
        thinking = (text if at < 0 else text[:at]) if parser.thought else f"{spec.open}\n\n"
        # What the model wrote goes back as text: a control spelling it spelled out stays spelled out.
        opened = spec.open if thinking.startswith(spec.open) else ""
        thinking = opened + self.engine.tokenizer.literal(thinking[len(opened) :])
        prompt = f"{work.prompt}{thinking}{spec.close}\n\n"
        return await self._answer(gen, work, plan, answer_request_id(work.rid), prompt, prefill, span, False)

    async def handle(self, work: Work) -> None:
        gen = Generation(rid=work.rid, t0=time.perf_counter(), prompt_tokens=work.prompt_tokens)
        started = now_ms()
        # safety_out holds the stream before it answers, so no frame reaches it unheard; its answer names
        # the replica whose step messages carry this stream.
        ack = await self.bus.request(
            subjects.SAFETY_OUT, StreamOpen(work=work, producer=self.bus.replica), StreamOpenAck, timeout=5.0
        )
        gen.steps = subjects.stream_steps(ack.replica, self.bus.replica)
        # Before any text: the prompt's size (Anthropic's `message_start`) and this build (OpenAI's fingerprint).
        await self.bus.emit(
            ChatEvent(
                rid=work.rid,
                type="prompt",
                usage=Usage(prompt_tokens=work.prompt_tokens),
                system_fingerprint=self.fingerprint,
            )
        )
        s = work.sampling
        model = self.model
        try:
            plan = plan_work(work, self.settings.registry)
        except PlanError:  # unplanned work no model here serves as asked (a direct caller): answer it plainly
            plan = RequestPlan(
                model=model,
                mode="fast",
                mode_reason="unplanned",
                prompt_budget=self.engine.max_model_len,
                max_tokens=s.max_tokens,
            )
        gen.priority = plan.priority
        gen.cache_salt = None if self.settings.share_prefix_cache else work.tenant
        reasoning = plan.mode == "reasoning"
        operation = "text_completion" if work.prompt_mode == "raw" else "chat"
        attrs: dict[str, str | int | float] = {
            "gen_ai.operation.name": operation,
            "gen_ai.system": "switchyard",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": plan.max_tokens,
            "gen_ai.request.temperature": s.temperature,
            "gen_ai.request.top_p": s.top_p,
            "switchyard.rid": work.rid,
            "switchyard.replica": self.bus.replica,
            "switchyard.mode": "reasoning" if reasoning else "fast",
            "switchyard.thinking": plan.thinking,
            "switchyard.thinking_budget": plan.thinking_budget,
            "switchyard.priority": plan.priority,
        }
        if s.seed is not None:
            attrs["gen_ai.request.seed"] = s.seed
        error: ErrorInfo | None = None
        with self.bus.tracer.start_as_current_span(
            f"{operation} {model}", kind=SpanKind.CLIENT, attributes=attrs
        ) as span:
            try:
                if work.rid in self._cancelled:
                    gen.finish = "cancelled"
                elif plan.thinking == "native":
                    gen.finish = await self._native(gen, work, plan, span)
                elif plan.thinking == "prompted":
                    think_prompt = work.prompt + THINK_OPEN
                    budget = plan.thinking_budget
                    gen.finish = await self._phase(
                        gen, "thinking", work.rid, think_prompt, params_of(s, budget, ["\n\n"]), span, True
                    )
                    if gen.finish in ("stop", "length"):
                        thought = self.engine.tokenizer.literal("".join(gen.thinking).rstrip())
                        answer_prompt = think_prompt + thought + ANSWER_OPEN
                        gen.finish = await self._answer(
                            gen, work, plan, answer_request_id(work.rid), answer_prompt, "", span, False
                        )
                elif work.mcp_tools and work.prompt_messages:
                    gen.finish = await self._with_mcp(gen, work, plan, span)
                else:
                    prefill = tool_prefill(work.client_tools, work.tool_choice)
                    if prefill:
                        gen.answer.append(prefill)
                        self.outbox.frame(gen.steps, gen.rid, gen.seq, "delta", prefill, 0)
                        gen.seq += 1
                    # One call at most: the answer ends where the first call does. Parallel calls: the model ends it.
                    stops = [TOOL_CALL_CLOSE] if work.client_tools and not work.parallel_tool_calls else []
                    params = params_of(
                        s, plan.max_tokens, extra_stop=stops, constraint=answer_constraint(work, prefill)
                    )
                    prompt = work.prompt + self.engine.tokenizer.literal(prefill)
                    gen.finish = await self._phase(gen, "delta", work.rid, prompt, params, span, True)
            except ConstraintError as e:  # the request's own constraint: invalid or over a grammar limit
                gen.finish = "error"
                error = ErrorInfo.of(ErrorCode.bad_request, str(e))
            except Exception as e:
                log.exception("generation failed")
                gen.finish = "error"
                error = ErrorInfo.of(ErrorCode.internal, f"generation failed: {e}")
                span.set_status(Status(StatusCode.ERROR, str(e)))
            usage = gen.usage()
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": usage.completion_tokens,
                    "gen_ai.usage.cache_read_input_tokens": usage.cached_tokens,
                    "gen_ai.response.finish_reasons": [gen.finish],
                    "gen_ai.response.model": model,
                }
            )
            ended = self.outbox.end(
                gen.steps,
                RawChunk(
                    rid=work.rid,
                    seq=gen.seq,
                    finished=True,
                    finish_reason=gen.finish,
                    usage=usage,
                    error=error,  # type: ignore[arg-type]
                    logprobs=None if s.logprobs is None else to_openai(self.engine.tokenizer, gen.logprobs),
                ),
            )
            await ended  # out before the record, and before a draining replica lets go
        part = InferencePart(
            model=model,
            replica=self.bus.replica,
            finish_reason=gen.finish,
            usage=usage,
            sampling=s,
            prompt_tokens=usage.prompt_tokens,
            raw_output="".join(gen.answer),
            thinking="".join(gen.thinking),
            ttft_ms=usage.ttft_ms,
            tpot_ms=usage.tpot_ms,
        )
        if gen.mcp.ran:
            part.mcp_rounds, part.prompt = gen.mcp.ran, gen.mcp.prompt
        await self.bus.log_stage(
            StageRecord(
                rid=work.rid,
                stage="inference",
                tenant=work.tenant,
                started_ms=started,
                duration_ms=(time.perf_counter() - gen.t0) * 1000,
                status="error" if error else "ok",
                error=error,
                decision={
                    "finish_reason": gen.finish,
                    "checker": ack.replica,
                    "completion_tokens": usage.completion_tokens,
                },
                part=part,
            )
        )

    async def accept(self, work: Work) -> WorkAccepted:
        """Take the work and ack at once (a dead replica is then known to the sender at once)."""
        await self.bus.hold(work.rid)
        task = asyncio.create_task(self.handle(work))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(lambda _: self.bus.release(work.rid))
        return WorkAccepted(rid=work.rid, replica=self.bus.replica)

    async def drain(self, timeout_s: float) -> None:
        """Shutdown: let the answers being streamed finish (SIGTERM loses no stream)."""
        if self._running:
            await asyncio.wait(list(self._running), timeout=timeout_s)

    async def heartbeat_forever(self, registry: TypedKV[Heartbeat]) -> None:
        while True:
            m = self.engine.metrics()
            beat = Heartbeat(
                replica=self.bus.replica,
                pool=self.settings.pool,
                model=self.model,
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
    # The registry as the bus holds it: a model added over the admin API has its entry there only.
    models = await LiveModels.follow(bus, settings.registry)
    # A registry model's file may need assembling first (Gemma's GGUF ships in chunk packages): seconds of I/O.
    await asyncio.to_thread(settings.serve_card)
    engine = create_engine(settings.engine_config())
    await engine.start()
    service = Inference(bus, engine, settings)
    # Every engine request streams through the meter, so /metrics carries vLLM's request figures.
    metrics = InferenceMetrics(engine, service.model)
    service.engine = metrics.engine
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    # One subscription for every cancel: it also catches cancels that overtake their work.
    await bus.subscribe(subjects.CHAT_CANCEL_ANY, CancelNotice, service.cancel, span=False)
    # Request/reply: the sender learns at once if this replica is gone, and then hands the work to
    # the pool's queue group instead (any live replica), so failover does not wait for the registry.
    await bus.subscribe(subjects.infer(settings.pool, bus.replica), Work, service.accept)
    await bus.subscribe(subjects.infer_any(settings.pool), Work, service.accept, queue=f"inference.{settings.pool}")
    registry = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
    hb = asyncio.create_task(service.heartbeat_forever(registry))

    async def cleanup() -> None:
        await models.close()
        hb.cancel()
        # Leave the registry at once, so routers move this replica's conversations now, not at TTL.
        await registry.delete(service.key)
        metrics.close()
        await service.drain(settings.drain_timeout_s)
        await engine.stop()

    return cleanup
