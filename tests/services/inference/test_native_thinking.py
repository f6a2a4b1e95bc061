"""A thinking model through the inference service (on the simulated engine, which thinks as a thinking card's
model does): its thinking streams as `thinking` frames, its answer as `delta`, and a spent thinking budget
closes the thinking so the model answers, all within the client's max_tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace

from switchyard.libs.engine.sim import SimEngine
from switchyard.libs.engine.types import EngineConfig, SamplingParams, StreamChunk
from switchyard.libs.models import ModelCard, ModelRegistry
from switchyard.libs.plan import plan
from switchyard.schemas import (
    ChatEvent,
    RawChunk,
    ResponseFormat,
    Sampling,
    StageRecord,
    StreamOpenAck,
    ThinkingAsk,
    ThinkingSpec,
    Work,
)
from switchyard.schemas.frames import StepFrame, decode_step
from switchyard.services.inference.service import Inference
from switchyard.services.inference.settings import InferenceSettings

THINKER = ModelCard(name="thinker", pool="thinker", engine="sim", thinking=ThinkingSpec())
REGISTRY = ModelRegistry(models=[*ModelRegistry().models, THINKER])
PROMPT = "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n"
THINK_TOKENS = 24


@dataclass
class FakeBus:
    """What the service sends: step frames and the final chunk, in order."""

    replica: str = "r1"
    tracer: trace.Tracer = field(default_factory=lambda: trace.get_tracer("test"))
    frames: list[StepFrame] = field(default_factory=list)
    max_frame_bytes: int = 1 << 20
    final: RawChunk | None = None
    records: list[StageRecord] = field(default_factory=list)
    events: list[ChatEvent] = field(default_factory=list)  # chat events sent straight to the gateway

    async def request(self, subject: str, msg: Any, reply: type, timeout: float = 0) -> StreamOpenAck:
        return StreamOpenAck(rid=msg.work.rid, replica="checker")

    async def publish_frame(self, subject: str, data: bytes) -> None:
        step = decode_step(data)
        assert isinstance(step, list)
        self.frames += step

    async def publish(self, subject: str, msg: Any, rid: str | None = None) -> None:
        self.final = msg

    async def log_stage(self, record: StageRecord) -> None:
        self.records.append(record)

    async def emit(self, event: ChatEvent) -> None:
        self.events.append(event)

    def text(self, kind: str) -> str:
        return "".join(f.text for f in self.frames if f.kind == kind)


class CountingEngine:
    """The simulated engine, counting the engine requests a generation takes."""

    def __init__(self, engine: SimEngine):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.prompts: list[str] = []
        self.params: list[SamplingParams] = []

    def cancel(self, request_id: str) -> None:
        self.engine.cancel(request_id)

    async def generate(self, request_id: str, prompt: str, params: SamplingParams) -> AsyncIterator[StreamChunk]:
        self.prompts.append(prompt)
        self.params.append(params)
        async for chunk in self.engine.generate(request_id, prompt, params):
            yield chunk


@pytest.fixture
async def served() -> AsyncIterator[tuple[Inference, FakeBus, CountingEngine]]:
    config = EngineConfig(
        kind="sim",
        sim_ttft_ms=0.1,
        sim_tpot_ms=0.1,
        sim_thinking=("<think>", "</think>"),
        sim_think_tokens=THINK_TOKENS,
    )
    sim = SimEngine(config)
    await sim.start()
    bus, engine = FakeBus(), CountingEngine(sim)
    settings = InferenceSettings(model_name="thinker", registry=REGISTRY)
    yield Inference(bus, engine, settings), bus, engine  # type: ignore[arg-type]
    await sim.stop()


def work(max_tokens: int, ask: ThinkingAsk | None = None, prompt: str = PROMPT, **kw: Any) -> Work:
    p = plan(REGISTRY, model="thinker", max_tokens=max_tokens, thinking=ask)
    return Work(rid="rid1", tenant="t", user="u", key_id="k", text="2+2?", prompt=prompt, plan=p, **kw)


async def test_thinking_closed_by_the_model_streams_apart_from_the_answer_in_one_engine_request(
    served: tuple[Inference, FakeBus, CountingEngine],
) -> None:
    service, bus, engine = served
    await service.handle(work(max_tokens=80, ask=ThinkingAsk(effort="high")))
    kinds = [f.kind for f in bus.frames]
    assert "thinking" in kinds and "delta" in kinds
    assert kinds == sorted(kinds, key=lambda k: k == "delta"), kinds  # all thinking first
    assert "<think>" not in bus.text("thinking") and "</think>" not in bus.text("thinking")
    assert "think>" not in bus.text("delta") and bus.text("delta") == bus.text("delta").lstrip()
    assert len(engine.prompts) == 1
    assert bus.final is not None and bus.final.usage is not None
    u = bus.final.usage
    assert bus.final.finish_reason == "length" and u.completion_tokens == 80
    assert THINK_TOKENS <= u.reasoning_tokens < u.completion_tokens
    part = bus.records[0].part
    assert part is not None and part.thinking == bus.text("thinking")  # type: ignore[union-attr]


async def test_a_spent_budget_closes_the_thinking_and_the_model_answers_within_max_tokens(
    served: tuple[Inference, FakeBus, CountingEngine],
) -> None:
    service, bus, engine = served
    await service.handle(work(max_tokens=40, ask=ThinkingAsk(enabled=True, budget_tokens=6)))
    assert bus.text("thinking") and bus.text("delta"), bus.frames
    # The second engine request continues from the prompt, the thinking so far, and the close tag.
    assert len(engine.prompts) == 2
    assert engine.prompts[1].startswith(PROMPT + "<think>") and engine.prompts[1].endswith("</think>\n\n")
    assert bus.final is not None and bus.final.usage is not None
    u = bus.final.usage
    assert u.completion_tokens <= 40 and 6 <= u.reasoning_tokens < 12, u
    assert bus.final.finish_reason == "length"


async def test_thinking_off_is_a_plain_answer(served: tuple[Inference, FakeBus, CountingEngine]) -> None:
    service, bus, _ = served
    # Context closes an empty thinking block after the prompt where the template has no switch.
    off = work(max_tokens=12, ask=ThinkingAsk(effort="none"), prompt=PROMPT + "<think>\n\n</think>\n\n")
    await service.handle(off)
    assert [f.kind for f in bus.frames] == ["delta"] * len(bus.frames) and bus.text("delta")
    assert bus.final is not None and bus.final.usage is not None and bus.final.usage.reasoning_tokens == 0


async def test_a_grammar_constrains_the_answer_alone(served: tuple[Inference, FakeBus, CountingEngine]) -> None:
    """The thinking is free text; the answer after it is decoded under the request's grammar, so the first
    engine request ends where the thinking does and a constrained one continues from the close tag."""
    service, bus, engine = served
    fmt = Sampling(max_tokens=80, response_format=ResponseFormat(type="json_object"))
    await service.handle(work(max_tokens=80, ask=ThinkingAsk(effort="high"), sampling=fmt))
    assert len(engine.prompts) == 2
    assert engine.params[0].constraint is None and engine.params[1].constraint is not None
    assert engine.prompts[1].endswith("</think>\n\n") and "</think>" not in engine.prompts[1][len(PROMPT) : -10]
    kinds = [f.kind for f in bus.frames]
    assert kinds == sorted(kinds, key=lambda k: k == "delta") and "delta" in kinds
    # The free answer the first request began after its thinking was never published.
    assert bus.final is not None and bus.final.usage is not None and bus.final.usage.completion_tokens <= 80


async def test_every_engine_request_of_a_generation_has_the_plans_priority_and_the_tenants_salt(
    served: tuple[Inference, FakeBus, CountingEngine],
) -> None:
    service, _, engine = served
    p = plan(REGISTRY, model="thinker", max_tokens=40, thinking=ThinkingAsk(enabled=True, budget_tokens=6))
    await service.handle(
        Work(
            rid="rid2",
            tenant="acme",
            user="u",
            key_id="k",
            text="2+2?",
            prompt=PROMPT,
            plan=p.model_copy(update={"priority": 30}),
        )
    )
    assert len(engine.params) == 2  # the thinking, then the answer after the spent budget
    assert [(x.priority, x.cache_salt) for x in engine.params] == [(30, "acme"), (30, "acme")]
    engine.params.clear()
    service.settings.share_prefix_cache = True
    await service.handle(work(max_tokens=8))
    assert engine.params and all(x.cache_salt is None for x in engine.params)
