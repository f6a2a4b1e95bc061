"""A simulated engine at GPU token rates, to measure everything but the model.

`SWITCHYARD_INFERENCE_ENGINE=sim` serves the `AsyncEngine` interface with the real tokenizer and
continuous-batching semantics: requests join at a step boundary once their prefill time has passed,
every running request gets one token per step, and finished or cancelled ones leave at once. A step
lasts what a published GPU figure says a decode step of that batch size lasts, so inter-token latency
rises with the batch as it would on the GPU. The text is recycled from `sim_text.SENTENCES`, starting
at a sentence picked from the request id, so output safety reads real sentences. The simulator spends
almost no CPU of its own (one list lookup and one queue put per token), which is the point: the
inference process's CPU under it is the pipeline's relay work, not the model's.

Never a default. It honours max_tokens, stop strings and logprobs (made-up values); it ignores EOS,
grammars, priorities and cache salts (it has no queue to order: every request joins at the first step after
its prefill time, and no prefix cache): its answers are for measuring, not reading. Serving a thinking model's card (`sim_thinking`), it
writes `<think>`, a few sentences' tokens, `</think>` before its answer, as such a model does; a prompt that
ends inside an open thinking block gets the thinking without the open tag, and one that ends with the close
tag (thinking turned off, or closed by a budget) gets only the answer.

Default timing (docs/benchmarks.md cites it): NVIDIA NIM 1.8.0, Llama-3.1-8B-Instruct on one H100,
inter-token latency 4.63 ms at concurrency 1 rising to 16.14 ms at 250, TTFT 10.26 ms at concurrency 1
(NVIDIA NIM for LLMs benchmarking guide, "Performance").
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from switchyard.libs.engine.sim_text import SENTENCES
from switchyard.libs.engine.types import (
    EngineConfig,
    EngineMetrics,
    SamplingParams,
    StreamChunk,
    TokenLogprobs,
    Usage,
    relay,
)
from switchyard.libs.tokenizer import load_tokenizer
from switchyard.libs.tokenizer.paths import default_model_path

log = structlog.get_logger()


@dataclass(frozen=True)
class SimTiming:
    """How long things take on the simulated GPU."""

    ttft_s: float
    points: tuple[tuple[int, float], ...]  # (batch, seconds per step), sorted by batch
    tpot_s: float = 0.0  # > 0: every step takes this long, whatever the batch

    @classmethod
    def of(cls, ttft_ms: float, tpot_ms: float, table: str) -> SimTiming:
        points = []
        for item in table.split(","):
            batch, ms = item.split(":")
            points.append((int(batch), float(ms) / 1000))
        if not points or any(b < 1 or s <= 0 for b, s in points):
            raise ValueError(f"sim step table needs batch:ms pairs with batch >= 1 and ms > 0, got {table!r}")
        return cls(ttft_s=ttft_ms / 1000, points=tuple(sorted(points)), tpot_s=tpot_ms / 1000)

    def step_s(self, batch: int) -> float:
        if self.tpot_s > 0:
            return self.tpot_s
        pts = self.points
        if len(pts) == 1 or batch <= pts[0][0]:
            return pts[0][1]
        i = min(bisect.bisect_left([b for b, _ in pts], batch), len(pts) - 1)
        (b0, s0), (b1, s1) = pts[i - 1], pts[i]
        return max(s0 + (s1 - s0) * (batch - b0) / (b1 - b0), 1e-4)


@dataclass
class _Seq:
    request_id: str
    prompt_tokens: int
    params: SamplingParams
    offset: int  # where in the corpus its answer starts
    queue: asyncio.Queue[StreamChunk]
    arrived: float
    ready_at: float  # prefill done: the first token comes at the first step boundary after this
    first_at: float | None = None
    made: int = 0
    last_at: float | None = None
    text: str = ""  # what it has sent, for its stop strings
    # Tokens written before the answer (a thinking model's thinking block): (id, text) each.
    before: tuple[tuple[int, str], ...] = ()


class SimEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.model_path or default_model_path(), config.tokenizer_cache_dir)
        self.model_name = self.tokenizer.model_name
        self.max_model_len = min(config.max_model_len, self.tokenizer.context_length)
        self.timing = SimTiming.of(config.sim_ttft_ms, config.sim_tpot_ms, config.sim_step_table)
        self._ids: list[int] = []
        self._pieces: list[str] = []
        self._starts: list[int] = []  # token index where each sentence starts
        self._waiting: list[_Seq] = []
        self._running: dict[str, _Seq] = {}
        self._cancelled: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._m = EngineMetrics()

    async def start(self) -> None:
        if self._task is not None:
            return
        for sentence in SENTENCES:
            self._starts.append(len(self._ids))
            for tok in self.tokenizer.encode(" " + sentence if self._ids else sentence):
                self._ids.append(tok)
                self._pieces.append(self.tokenizer.decode([tok]))
        self._task = asyncio.create_task(self._loop())
        self._task.add_done_callback(self._stopped)

    def _stopped(self, task: asyncio.Task[None]) -> None:
        # A loop that is gone ends what it held with an error instead of leaving its callers waiting.
        if not task.cancelled() and task.exception() is not None:
            log.error("sim engine loop failed", error=repr(task.exception()))
        for seq in [*self._running.values(), *self._waiting]:
            seq.queue.put_nowait(StreamChunk(seq.request_id, "", [], finished=True, finish_reason="error"))
        self._running.clear()
        self._waiting.clear()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids or len(ids) >= self.max_model_len or self._task is None or self._task.done():
            yield StreamChunk(request_id, "", [], finished=True, finish_reason="error")
            return
        now = time.monotonic()
        digest = int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big")
        seq = _Seq(
            request_id,
            len(ids),
            params,
            self._starts[digest % len(self._starts)],
            asyncio.Queue(),
            now,
            now + self.timing.ttft_s,
            before=self._thinking(prompt if isinstance(prompt, str) else self.tokenizer.decode(ids), digest),
        )
        self._waiting.append(seq)
        self._wake.set()
        async with contextlib.aclosing(relay(seq.queue, lambda: self.cancel(request_id))) as chunks:
            async for chunk in chunks:
                yield chunk

    def _thinking(self, prompt: str, digest: int) -> tuple[tuple[int, str], ...]:
        """The thinking block a thinking model writes before answering this prompt (none for other models)."""
        if self.config.sim_thinking is None:
            return ()
        open_tag, close_tag = self.config.sim_thinking
        tail = prompt.rstrip()
        if tail.endswith(close_tag):
            return ()
        start = self._starts[(digest // 7) % len(self._starts)]
        n = len(self._ids)
        body = [
            (self._ids[(start + i) % n], self._pieces[(start + i) % n]) for i in range(self.config.sim_think_tokens)
        ]
        opening = [] if tail.endswith(open_tag) else self._pieces_of(open_tag + "\n")
        return (*opening, *body, *self._pieces_of("\n" + close_tag + "\n\n"))

    def _pieces_of(self, text: str) -> list[tuple[int, str]]:
        return [(i, self.tokenizer.decode([i])) for i in self.tokenizer.encode(text)]

    def cancel(self, request_id: str) -> None:
        self._cancelled.add(request_id)
        self._wake.set()

    def metrics(self) -> EngineMetrics:
        m = self._m
        m.running, m.waiting = len(self._running), len(self._waiting)
        return EngineMetrics(**vars(m))

    async def _loop(self) -> None:
        # Invariant at the top: every running sequence has had one token per step since it joined, and
        # a waiting one joins (with its first token) at the first step boundary after its prefill.
        while True:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                # Woken by a newcomer, or by a cancel for a request already gone: look again.
                self._step_cancels(time.monotonic())
                continue
            if self._running:
                ready = sum(1 for s in self._waiting if s.ready_at <= time.monotonic())
                await asyncio.sleep(self.timing.step_s(len(self._running) + ready))
            else:  # an idle engine starts the earliest prefill's first token when that prefill is done
                wait = min(s.ready_at for s in self._waiting) - time.monotonic()
                if wait > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait)
                        continue  # a newcomer (or a cancel) arrived first: look again
                    except TimeoutError:
                        pass
            self._step(time.monotonic())

    def _step_cancels(self, now: float) -> None:
        """End every cancelled request still here; forget cancels for requests already gone."""
        for rid in self._cancelled:
            seq = self._running.pop(rid, None) or next((s for s in self._waiting if s.request_id == rid), None)
            if seq is not None:
                if seq in self._waiting:
                    self._waiting.remove(seq)
                seq.queue.put_nowait(self._last(seq, now, "cancelled", []))
        self._cancelled.clear()

    def _step(self, now: float) -> None:
        self._step_cancels(now)
        joined = [s for s in self._waiting if s.ready_at <= now]
        for seq in joined:
            self._waiting.remove(seq)
            seq.first_at = now
            self._running[seq.request_id] = seq
        m = self._m
        m.steps += 1
        m.last_batch_size = len(self._running)
        m.max_batch_size_seen = max(m.max_batch_size_seen, m.last_batch_size)
        for rid, seq in list(self._running.items()):
            thinking = seq.made < len(seq.before)
            pos = (seq.offset + seq.made - len(seq.before)) % len(self._ids)
            seq.made += 1
            seq.last_at = now
            m.generated_tokens += 1
            if thinking:
                tok, text = seq.before[seq.made - 1]
                ids = [tok]
            else:
                ids, text = [self._ids[pos]], self._pieces[pos]
            if seq.made == len(seq.before) + 1:  # an answer opens on a sentence, not on the space before it
                text = text.lstrip()
            lps = self._logprobs(seq, pos)
            cut = self._stop_at(seq, text)
            if cut is not None:  # a stop string completed: the text before it, and the answer ends there
                del self._running[rid]
                seq.queue.put_nowait(self._last(seq, now, "stop", ids, cut, lps))
            elif seq.made >= seq.params.max_tokens:
                del self._running[rid]
                seq.queue.put_nowait(self._last(seq, now, "length", ids, text, lps))
            else:
                seq.queue.put_nowait(StreamChunk(rid, text, ids, token_at=now, logprobs=lps))

    @staticmethod
    def _stop_at(seq: _Seq, text: str) -> str | None:
        """None while no stop string is complete; else the part of `text` before the first one (what was
        sent before this token is not taken back)."""
        whole = seq.text + text
        hits = [i for i in (whole.find(s) for s in seq.params.stop if s) if i >= 0]
        seq.text = whole
        if not hits:
            return None
        return whole[len(whole) - len(text) : max(min(hits), len(whole) - len(text))]

    def _logprobs(self, seq: _Seq, pos: int) -> list[TokenLogprobs] | None:
        k = seq.params.logprobs
        if k is None:
            return None
        n = len(self._ids)
        top = [(self._ids[(pos + j) % n], -0.25 * (j + 1)) for j in range(k)]
        return [TokenLogprobs(self._ids[pos], -0.25, top)]

    def _last(
        self,
        seq: _Seq,
        now: float,
        reason: str,
        ids: list[int],
        text: str = "",
        lps: list[TokenLogprobs] | None = None,
    ) -> StreamChunk:
        ttft = None if seq.first_at is None else seq.first_at - seq.arrived
        first, last = seq.first_at, seq.last_at
        tpot = (last - first) / (seq.made - 1) if first is not None and last is not None and seq.made > 1 else None
        usage = Usage(seq.prompt_tokens, 0, seq.made, ttft, tpot)
        return StreamChunk(seq.request_id, text, ids, True, reason, usage, token_at=now if ids else None, logprobs=lps)
