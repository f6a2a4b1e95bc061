"""Drive an engine's scheduler and step function synchronously, without its thread."""

from __future__ import annotations

from collections.abc import Callable

from switchyard.libs.engine.engine import NativeEngine
from switchyard.libs.engine.request import Request
from switchyard.libs.engine.types import SamplingParams


def make_request(rid: str, prompt: list[int], max_tokens: int = 8, eos: set[int] | None = None, **kw) -> Request:
    return Request(rid, prompt, SamplingParams(max_tokens=max_tokens, **kw), eos or set(), max_len=100_000)


def drive(eng: NativeEngine, reqs: list[Request], on_step: Callable[[int], None] | None = None) -> dict[str, list[int]]:
    assert eng.scheduler is not None
    for r in reqs:
        eng.scheduler.add(r)
    step = 0
    # Invariant: every request is waiting, running or finished; the loop ends when none is left.
    while eng.scheduler.has_work():
        seqs = eng.scheduler.schedule()
        assert seqs, "scheduler made no progress"
        eng._step(seqs)
        step += 1
        if on_step is not None:
            on_step(step)
    return {r.request_id: list(r.output_ids) for r in reqs}
