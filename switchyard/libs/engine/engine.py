"""The native engine: a step loop in a dedicated thread, streaming chunks to asyncio callers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from switchyard.libs.engine import native
from switchyard.libs.engine.block_pool import BlockPool
from switchyard.libs.engine.kernels import Calibration, measure, row_invariance
from switchyard.libs.engine.kv_cache_manager import KVCacheManager
from switchyard.libs.engine.logits import adjust_row, adjusts, bad_bias_token, log_probs, token_logprobs
from switchyard.libs.engine.model import DecoderModel, KVCache, measure_decode_attention
from switchyard.libs.engine.request import Request, TextStream
from switchyard.libs.engine.runner import ModelRunner
from switchyard.libs.engine.sampler import sample
from switchyard.libs.engine.scheduler import ScheduledSeq, Scheduler
from switchyard.libs.engine.threads import StepThreads, engine_threads
from switchyard.libs.engine.types import (
    Constraint,
    EngineConfig,
    EngineMetrics,
    SamplingParams,
    StreamChunk,
    TokenLogprobs,
    Usage,
    relay,
)
from switchyard.libs.engine.weights import load_weights
from switchyard.libs.tokenizer import Tokenizer, default_model_path, load_tokenizer

if TYPE_CHECKING:
    from switchyard.libs.engine.grammar import Grammars

log = logging.getLogger(__name__)


def _lower_priority(nice: int) -> None:
    """Nice this thread by `nice` more (Linux: per thread) before it makes its OpenMP team, whose threads inherit it."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:
        log.warning("could not lower the engine thread's priority", exc_info=True)


class EngineDeviceError(RuntimeError):
    """The configured device cannot run the engine (no GPU, unknown name)."""


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[StreamChunk]
    text: TextStream


class NativeEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_path = config.model_path or default_model_path()
        self.tokenizer: Tokenizer = load_tokenizer(self.model_path, config.tokenizer_cache_dir)
        self.model_name = self.tokenizer.model_name
        self.max_model_len = min(config.max_model_len, self.tokenizer.context_length)
        self.dtype = config.dtype  # 'auto' is resolved by measuring the kernels at load
        self.calibration: Calibration | None = None
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._cancel_lock = threading.Lock()
        self._cancels: set[str] = set()
        self._early_cancels: dict[str, None] = {}
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._m = EngineMetrics()
        self.kv_cache_manager: KVCacheManager | None = None
        self.scheduler: Scheduler | None = None
        self.runner: ModelRunner | None = None
        self._grammars: Grammars | None = None
        self._grammars_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        loaded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._thread = threading.Thread(target=self._run, args=(loaded,), name="engine-step", daemon=True)
        self._thread.start()
        try:
            await loaded
        except BaseException:
            self._thread = None
            raise

    def _run(self, loaded: asyncio.Future[None]) -> None:
        """The engine thread: loads the model, then steps. Every torch call of the engine runs on
        this one thread: with more than one intra-op thread, each thread that calls torch gets its
        own OpenMP team, and a second team (e.g. one left by loading on a worker thread) competes
        with the first for the same cores at every op."""
        loop = loaded.get_loop()
        try:
            _lower_priority(self.config.step_nice)
            torch.set_num_threads(engine_threads(self.config.threads))
            if self.runner is None:
                self._load()
        except BaseException as e:
            loop.call_soon_threadsafe(loaded.set_exception, e)
            return
        loop.call_soon_threadsafe(loaded.set_result, None)
        self._loop()

    def _load(self) -> None:
        cache_dir = self.config.cache_dir or os.path.join("var", "cache", "engine")
        device = self.config.device
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise EngineDeviceError(f"device {device!r} requested but torch sees no CUDA GPU")
            if self.dtype == "auto":
                # The CPU calibration says nothing about a GPU, where bf16 tensor cores win.
                self.dtype = "bf16"
        elif device != "cpu":
            raise EngineDeviceError(f"unknown device {device!r} (native engine: 'cpu' or 'cuda[:n]')")
        if device == "cpu":
            # Before the calibration, so that `auto` measures the kernels that will serve.
            try:
                native.select_isa(self.config.kernel_isa)
            except ValueError as e:
                raise EngineDeviceError(str(e)) from e
        if self.dtype in ("auto", "hybrid", "bf16") and device == "cpu":
            self.calibration = measure()
            log.info("kernel calibration: %s", self.calibration)
            if self.dtype == "auto":
                self.dtype = self.calibration.best_dtype()
        cfg, tensors = load_weights(self.model_path, self.dtype, cache_dir)
        model = DecoderModel(cfg, tensors, self.dtype).to(device)
        if device == "cpu":
            model.pack_cpu_weights()
        if self.calibration is not None:
            model.small_max_rows = self.calibration.small_max_rows
            model.invariance = row_invariance(model.matrix_shapes())
            model.fused_decode = measure_decode_attention(cfg)
            log.info("bf16 row invariance: %s; fused decode attention: %s", model.invariance, model.fused_decode)
        self.build_with_model(model)

    def build_with_model(self, model: DecoderModel) -> None:
        """Size the KV cache and wire block pool, KV-cache manager, scheduler and runner around an
        already-built model."""
        c = self.config
        bs = c.block_size
        self.max_model_len = min(self.max_model_len, model.cfg.max_position)
        num_blocks = c.num_blocks
        if num_blocks <= 0:
            per_block = KVCache.bytes_per_block(model.cfg, bs, model.kv_dtype)
            budget = c.kv_cache_bytes
            want = c.max_num_seqs * -(-self.max_model_len // bs)
            num_blocks = max(min(want, budget // per_block), -(-self.max_model_len // bs) + 1)
        # A sequence can never grow past what the whole pool holds.
        self.max_model_len = min(self.max_model_len, num_blocks * bs)
        self.kv_cache_manager = KVCacheManager(BlockPool(num_blocks, bs, c.enable_prefix_caching))
        self.scheduler = Scheduler(
            self.kv_cache_manager, c.max_num_seqs, c.max_num_batched_tokens, c.scheduling_policy, c.priority_aging_s
        )
        kv = KVCache(model.cfg, num_blocks, bs, model.kv_dtype, device=str(model.device))
        self.runner = ModelRunner(model, kv)

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        if self._grammars is not None:
            self._grammars.close()
            self._grammars = None

    # -- public API ----------------------------------------------------------------------
    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        vocab = self.runner.model.cfg.vocab_size if self.runner is not None else 0
        if (
            not ids
            or len(ids) >= self.max_model_len
            or self._thread is None
            or bad_bias_token(params, vocab) is not None
        ):
            yield StreamChunk(request_id, "", [], finished=True, finish_reason="error")
            return
        req = Request(
            request_id,
            ids,
            params,
            set() if params.ignore_eos else self.tokenizer.eos_token_ids,
            max_len=self.max_model_len,
        )
        if params.constraint is not None:
            # Compiled off the step loop (in the grammar worker process), so other streams keep stepping;
            # a refusal (ConstraintError: invalid, over a limit, over its compile time) is the caller's
            # to report as bad input, before any chunk.
            req.grammar = await asyncio.to_thread(self._matcher, params.constraint)
        stream = _Stream(
            asyncio.get_running_loop(),
            asyncio.Queue(),
            TextStream(self.tokenizer, params.stop, self.tokenizer.eos_token_ids),
        )
        # Registered under the cancel lock: a concurrent cancel() either lands in
        # _early_cancels before this point or finds the request queued (see _drain_control).
        with self._cancel_lock:
            early = self._early_cancels.pop(request_id, 0) is None
            if not early:
                self._streams[request_id] = stream
                self._inbox.put(req)
        if early:
            yield StreamChunk(
                request_id,
                "",
                [],
                finished=True,
                finish_reason="cancelled",
                usage=Usage(len(ids), 0, 0, None, None),
            )
            return
        self._wake.set()
        async with contextlib.aclosing(relay(stream.queue, lambda: self.cancel(request_id))) as chunks:
            async for chunk in chunks:
                yield chunk

    def _matcher(self, c: Constraint) -> Any:
        """A grammar matcher for one request; xgrammar loads with the first constrained request."""
        with self._grammars_lock:
            if self._grammars is None:
                from switchyard.libs.engine.grammar import Grammars

                assert self.runner is not None
                self._grammars = Grammars(self.tokenizer, self.runner.model.cfg.vocab_size, self.config.grammar_limits)
        return self._grammars.matcher(c)

    def cancel(self, request_id: str) -> None:
        with self._cancel_lock:
            self._cancels.add(request_id)
            if request_id not in self._streams:
                # generate() was called but not yet iterated: remember, bounded, so a late
                # start is still cancelled while stray ids cannot grow memory.
                self._early_cancels[request_id] = None
                while len(self._early_cancels) > 1024:
                    self._early_cancels.pop(next(iter(self._early_cancels)))
        self._wake.set()

    def metrics(self) -> EngineMetrics:
        m = self._m
        if self.scheduler is not None and self.kv_cache_manager is not None:
            s, kv = self.scheduler, self.kv_cache_manager
            m.running = len(s.running)
            m.waiting = len(s.waiting)
            m.kv_blocks_used = kv.num_used_blocks
            m.kv_blocks_free = kv.num_free_blocks
            m.prefix_cache_queries_tokens = kv.stats.queries_tokens
            m.prefix_cache_hits_tokens = kv.stats.hits_tokens
            m.preemptions = s.stats.preemptions
        return EngineMetrics(**vars(m))

    # -- step loop (engine thread) ---------------------------------------------------------
    @staticmethod
    def _advance_grammar(req: Request, tok: int) -> str | None:
        """Feeds the sampled token to the request's matcher; the answer ends when the grammar does."""
        if not req.grammar.accept_token(tok):
            log.error("constrained request %s sampled token %d outside its grammar", req.request_id, tok)
            return "error"
        return "stop" if req.grammar.is_terminated() else None

    def _emit(self, req: Request, chunk: StreamChunk) -> None:
        st = self._streams.get(req.request_id)
        if st is not None:
            st.loop.call_soon_threadsafe(st.queue.put_nowait, chunk)
        if chunk.finished:
            self._streams.pop(req.request_id, None)

    def _finish(
        self, req: Request, reason: str, new_ids: list[int] | None = None, lps: list[TokenLogprobs] | None = None
    ) -> None:
        assert self.scheduler is not None
        self.scheduler.finish(req, reason)
        st = self._streams.get(req.request_id)
        text = st.text.push(new_ids or [], final=True) if st is not None and reason != "cancelled" else ""
        self._emit(
            req,
            StreamChunk(req.request_id, text, new_ids or [], True, reason, req.usage(), req.last_token_at, lps),
        )

    def _drain_control(self) -> None:
        assert self.scheduler is not None
        # Snapshot cancels before draining the inbox: a cancel taken here was issued after its
        # request was queued, so the request is in the scheduler by the time we look it up.
        with self._cancel_lock:
            cancels, self._cancels = self._cancels, set()
        while True:
            try:
                self.scheduler.add(self._inbox.get_nowait())
            except queue.Empty:
                break
        for rid in cancels:
            req = self.scheduler.find(rid)
            if req is not None:
                self._finish(req, "cancelled")

    def _loop(self) -> None:
        assert self.scheduler is not None
        torch.set_grad_enabled(False)
        c = self.config
        chooser = StepThreads(c.threads, c.wide_step_batch, c.adaptive_threads)
        threads = chooser.initial()
        torch.set_num_threads(threads)
        # Invariant at the top of each iteration: every cancel and new request that arrived
        # before the previous step ended is applied before the next batch is formed.
        while not self._stopping:
            self._drain_control()
            if not self.scheduler.has_work():
                self._wake.wait()
                self._wake.clear()
                continue
            seqs = self.scheduler.schedule()
            if not seqs:
                self._wake.wait(0.01)
                self._wake.clear()
                continue
            wanted = chooser.choose(len(seqs))
            if wanted != threads:
                threads = wanted
                torch.set_num_threads(threads)
            try:
                started = time.perf_counter()
                self._step(seqs)
                decode = all(s.num_new_tokens == 1 for s in seqs)
                chooser.record(len(seqs), threads, time.perf_counter() - started, decode)
                self._m.wide_steps = chooser.wide_steps
            except Exception:
                log.exception("engine step failed")
                for s in seqs:
                    if s.request.finish_reason is None:
                        self._finish(s.request, "error")
        # Shutting down: nobody may be left waiting on a stream that will never end.
        self._drain_control()
        for req in [*self.scheduler.running, *self.scheduler.waiting]:
            self._finish(req, "cancelled")

    def _step(self, seqs: list[ScheduledSeq]) -> None:
        assert self.scheduler is not None and self.runner is not None
        sampling = [s for s in seqs if s.samples]
        matchers = [s.request.grammar for s in sampling]
        constrained = [i for i, m in enumerate(matchers) if m is not None]
        # Masks are filled while the forward pass runs; each reads only its own request's matcher.
        masks = self._grammars.fill_async(matchers) if constrained and self._grammars is not None else None
        logits = self.runner.run(seqs)
        # The model's own distribution, before penalties, bias and grammar change the row (vLLM's default).
        raw = {i: log_probs(logits[i]) for i, s in enumerate(sampling) if s.request.params.logprobs is not None}
        for i, s in enumerate(sampling):
            req = s.request
            if adjusts(req.params):
                adjust_row(logits[i], req.params, req.prompt_ids, req.output_ids)
        if masks is not None:
            self._grammars.apply(logits, masks.result(), constrained)  # type: ignore[union-attr]
        tokens = sample(
            logits,
            [s.request.params for s in sampling],
            [s.request.generator for s in sampling],
        )
        for s in seqs:
            self.scheduler.advance(s)
        m = self._m
        m.steps += 1
        m.last_batch_size = len(seqs)
        m.max_batch_size_seen = max(m.max_batch_size_seen, len(seqs))
        m.generated_tokens += len(tokens)
        for i, (s, tok) in enumerate(zip(sampling, tokens, strict=True)):
            req = s.request
            lps = [token_logprobs(raw[i], tok, req.params.logprobs or 0)] if i in raw else None
            req.append_token(tok)
            st = self._streams.get(req.request_id)
            reason = req.check_length_or_eos()
            if req.grammar is not None and reason is None:
                reason = self._advance_grammar(req, tok)
            if reason is not None:
                self._finish(req, reason, [tok], lps)
                continue
            text = st.text.push([tok]) if st is not None else ""
            if st is not None and st.text.stopped:
                self.scheduler.finish(req, "stop")
                self._emit(
                    req, StreamChunk(req.request_id, text, [tok], True, "stop", req.usage(), req.last_token_at, lps)
                )
                continue
            self._emit(req, StreamChunk(req.request_id, text, [tok], token_at=req.last_token_at, logprobs=lps))
