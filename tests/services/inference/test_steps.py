"""Inference's step messages: every stream's frames of one engine step leave as one message per checker,
each stream's frames in order and its end after them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace

from switchyard.libs.bus import current_context
from switchyard.libs.engine.sim import SimEngine
from switchyard.libs.engine.types import EngineConfig
from switchyard.schemas import ChatEvent, RawChunk, Sampling, StageRecord, StreamOpenAck, Work
from switchyard.schemas.frames import StepFrame, decode_step
from switchyard.services.inference.service import Inference
from switchyard.services.inference.settings import InferenceSettings
from switchyard.services.inference.steps import StepOutbox


@dataclass
class FakeBus:
    """What the service sends, per subject and in order: step messages (decoded) and ends."""

    replica: str = "i1"
    max_frame_bytes: int = 1 << 20
    tracer: trace.Tracer = field(default_factory=lambda: trace.get_tracer("test"))
    sent: list[tuple[str, list[StepFrame] | RawChunk]] = field(default_factory=list)
    rids_seen_sending: set[str] = field(default_factory=set)

    async def request(self, subject: str, msg: Any, reply: type, timeout: float = 0) -> StreamOpenAck:
        # Two checkers: streams alternate between them by their rid's last digit.
        return StreamOpenAck(rid=msg.work.rid, replica=f"s{int(msg.work.rid[-1]) % 2}")

    async def publish_frame(self, subject: str, data: bytes) -> None:
        step = decode_step(data)
        assert isinstance(step, list)
        self.sent.append((subject, step))

    async def publish(self, subject: str, msg: Any, rid: str | None = None) -> None:
        self.rids_seen_sending.add(current_context().rid)
        self.sent.append((subject, msg))

    async def log_stage(self, record: StageRecord) -> None:
        pass

    async def emit(self, event: ChatEvent) -> None:
        pass

    def messages(self) -> list[list[StepFrame]]:
        return [m for _, m in self.sent if isinstance(m, list)]


@pytest.fixture
async def served() -> AsyncIterator[tuple[Inference, FakeBus]]:
    sim = SimEngine(EngineConfig(kind="sim", sim_ttft_ms=1, sim_tpot_ms=2))
    await sim.start()
    bus = FakeBus()
    yield Inference(bus, sim, InferenceSettings(model_name="sim")), bus  # type: ignore[arg-type]
    await sim.stop()


async def test_a_step_is_one_message_per_checker_whatever_the_number_of_streams(
    served: tuple[Inference, FakeBus],
) -> None:
    service, bus = served
    works = [
        Work(rid=f"r{i}", tenant="t", user="u", key_id="k", text="q", prompt="Hello", sampling=Sampling(max_tokens=20))
        for i in range(16)
    ]
    await asyncio.gather(*(service.handle(w) for w in works))
    frames = [f for m in bus.messages() for f in m]
    assert len(frames) >= 16 * 10
    # 16 streams in step: about two messages a step (one per checker), not one per stream.
    assert len(bus.messages()) * 4 <= len(frames), (len(bus.messages()), len(frames))
    for subject, m in bus.sent:
        checker = subject.split(".")[2]
        rids = [m.rid] if isinstance(m, RawChunk) else [f.rid for f in m]
        assert all(checker == f"s{int(rid[-1]) % 2}" for rid in rids)  # each stream's frames go to its checker
        assert subject.endswith(".i1")
    for w in works:
        mine = [(i, m) for i, (_, m) in enumerate(bus.sent) if isinstance(m, RawChunk) and m.rid == w.rid]
        assert len(mine) == 1
        at, end = mine[0]
        seqs = [f.seq for _, m in bus.sent[:at] if isinstance(m, list) for f in m if f.rid == w.rid]
        assert seqs == list(range(end.seq)) and end.finished  # in order, every frame before the end
        after = [f for _, m in bus.sent[at:] if isinstance(m, list) for f in m if f.rid == w.rid]
        assert not after
    assert bus.rids_seen_sending == {""}  # a step's message is every stream's: it carries none's context


async def test_a_step_over_the_size_limit_goes_in_several_messages_and_an_end_after_its_frames() -> None:
    bus = FakeBus(max_frame_bytes=100)
    outbox = StepOutbox(bus)  # type: ignore[arg-type]
    for i in range(10):
        outbox.frame("stream.steps.s0.i1", f"r{i}", 0, "delta", "x" * 20, 1)
    ended = outbox.end("stream.steps.s0.i1", RawChunk(rid="r0", seq=1, finished=True))
    outbox.frame("stream.steps.s0.i1", "r1", 1, "delta", "late", 1)
    await asyncio.wait_for(ended, 5)
    await asyncio.sleep(0)
    kinds = ["end" if isinstance(m, RawChunk) else len(m) for _, m in bus.sent]
    assert kinds.index("end") == len(kinds) - 2 and sum(k for k in kinds if k != "end") == 11
    assert all(k == "end" or k < 10 for k in kinds)
