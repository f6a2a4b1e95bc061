"""AsyncEngine over TensorRT-LLM's LLM API (PyTorch backend: in-flight batching, KV block reuse on the GPU).

tensorrt_llm is imported only in start(), so this module loads (and its tests run) anywhere. What it
relies on was read in NVIDIA/TensorRT-LLM's source (tests/engine/fake_tensorrt_llm.py names the files):

- The model is a Hugging Face checkpoint directory: the library loads no GGUF, and a hub name needs the
  internet. A model whose path is a directory is served as it is, and our tokenizer reads the same
  directory's files. A GGUF model needs one beside it (EngineConfig.trtllm_model,
  SWITCHYARD_TRTLLM_MODEL): `python -m switchyard.cli export-hf DIR` writes it from the GGUF, so its
  vocabulary is ours.
- Our tokenizer is the only one in play: prompts go in as token ids, `end_id` is passed explicitly and
  stop strings are applied here. (With `end_id` set the library would not encode stop strings, and its
  own stop handling cuts tokens it already streamed, leaving an empty final diff.)
- LLM() rejects unknown keyword arguments, and a prompt longer than `max_num_tokens` unless chunked
  prefill is on; the KV cache takes 90 % of free GPU memory unless `max_tokens` caps it.
- Executor errors surface from the stream's `__anext__`, `generate_async` raises while shutting down:
  both end the request with finish reason 'error'. An abort ends the stream with 'cancelled'.
- Scheduling is the library's own (first come, first served in its capacity scheduler): a request's
  `priority` is not passed, as its range and its schedulers' use of it differ from ours. A request's
  `cache_salt` is passed where `generate_async` takes one (it limits block reuse to requests with the same
  salt, as vLLM's does); a library too old for it shares cached prefixes across tenants, said once at start.
- Per-request timings and KV reuse come from `return_perf_metrics`; engine-wide KV figures from
  `get_stats_async()` (with `enable_iter_perf_stats`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

from switchyard.libs.engine.adapter import (
    EarlyCancels,
    RequestStats,
    call_on_loop,
    check_constraint,
    early_end,
    guide_args,
    push_tokens,
)
from switchyard.libs.engine.request import TextStream
from switchyard.libs.engine.types import Constraint, EngineConfig, EngineMetrics, SamplingParams, StreamChunk
from switchyard.libs.tokenizer import Tokenizer, default_model_path, load_tokenizer

log = logging.getLogger(__name__)

# The library's finish reasons in ours; 'timeout' is a request deadline we never set.
FINISH_REASONS = {"stop": "stop", "length": "length", "cancelled": "cancelled", "timeout": "error"}
STATS_TIMEOUT_S = 2.0  # get_stats_async's wait for the next iteration before it ends a round
STATS_IDLE_S = 0.5  # between rounds: an idle engine's stats stream ends at once
KV_BYTES_PER_ELEMENT = 2  # the KV cache is fp16/bf16 on the GPU


def _hf_checkpoint(path: str | None) -> tuple[str, dict[str, Any]]:
    """The checkpoint directory and its config.json, checked before the library loads anything."""
    hint = (
        "make the model's path a checkpoint directory, or write one from the served GGUF with"
        " `python -m switchyard.cli export-hf DIR` and set SWITCHYARD_TRTLLM_MODEL=DIR"
    )
    if not path:
        raise ValueError(f"the tensorrt_llm engine needs a Hugging Face checkpoint directory; {hint}")
    if path.endswith(".gguf") or os.path.isfile(path):
        raise ValueError(f"{path}: TensorRT-LLM loads no GGUF file; {hint}")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise ValueError(f"{path} is not a local checkpoint directory with a config.json (no hub here); {hint}")
    with open(config) as f:
        return path, json.load(f)


def kv_cache_max_tokens(config: EngineConfig, hf_config: dict[str, Any], max_model_len: int) -> int:
    """KvCacheConfig.max_tokens: the configured blocks, or the KV byte budget, never under one full sequence."""
    if config.num_blocks > 0:
        return max(max_model_len, config.num_blocks * config.block_size)
    heads = int(hf_config["num_attention_heads"])
    kv_heads = int(hf_config.get("num_key_value_heads") or heads)
    head_dim = int(hf_config.get("head_dim") or int(hf_config["hidden_size"]) // heads)
    per_token = 2 * int(hf_config["num_hidden_layers"]) * kv_heads * head_dim * KV_BYTES_PER_ELEMENT
    return max(max_model_len, config.kv_cache_bytes // per_token)


class TrtLlmEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        path = config.model_path or ""
        # A directory is the checkpoint itself, whatever SWITCHYARD_TRTLLM_MODEL says (that is a GGUF model's):
        # the library and our tokenizer (prompt ids, end_id and stop ids) read the same files.
        is_dir = bool(path) and os.path.isdir(path)
        gguf = path if path.endswith(".gguf") else default_model_path()
        self.tokenizer: Tokenizer = load_tokenizer(path if is_dir else gguf, config.tokenizer_cache_dir)
        self.model_name = self.tokenizer.model_name
        self.max_model_len = min(config.max_model_len, self.tokenizer.context_length)
        self.hf_model = (
            path if is_dir else config.trtllm_model or (path if path and not path.endswith(".gguf") else None)
        )
        eos = sorted(self.tokenizer.eos_token_ids)
        self._end_id = (
            self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else (eos[0] if eos else -1)
        )
        self._more_eos = [t for t in eos if t != self._end_id]
        self._llm: Any = None
        self._trt: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stats_task: asyncio.Task[None] | None = None
        self._handles: dict[str, Any] = {}
        self._salted = False  # whether the library's generate_async takes a cache_salt
        self._cancels = EarlyCancels()
        self._m = EngineMetrics()

    async def start(self) -> None:
        if self._llm is not None:
            return
        model_dir, hf_config = _hf_checkpoint(self.hf_model)
        vocab = hf_config.get("vocab_size")
        if vocab is not None and int(vocab) < self.tokenizer.vocab_size:
            raise ValueError(
                f"{model_dir} has {vocab} token ids, our tokenizer {self.tokenizer.vocab_size}: not our model"
            )
        import tensorrt_llm
        from tensorrt_llm.llmapi import KvCacheConfig

        self._trt = tensorrt_llm
        kv = KvCacheConfig(
            enable_block_reuse=self.config.enable_prefix_caching,
            max_tokens=kv_cache_max_tokens(self.config, hf_config, self.max_model_len),
        )
        self._llm = await asyncio.to_thread(
            tensorrt_llm.LLM,
            model=model_dir,
            kv_cache_config=kv,
            max_batch_size=self.config.max_num_seqs,
            max_num_tokens=self.config.max_num_batched_tokens,
            max_seq_len=self.max_model_len,
            # Prompts up to max_model_len arrive; without chunking any over max_num_tokens is refused.
            enable_chunked_prefill=True,
            return_perf_metrics=True,
            enable_iter_perf_stats=True,
            # The grammar library the native engine uses: response formats are passed through to it.
            guided_decoding_backend="xgrammar",
        )
        self._salted = "cache_salt" in inspect.signature(self._llm.generate_async).parameters
        if not self._salted:
            log.warning("this tensorrt_llm takes no cache_salt: cached prefixes are shared across tenants")
        self._loop = asyncio.get_running_loop()
        self._stats_task = asyncio.create_task(self._follow_stats())

    async def stop(self) -> None:
        llm, self._llm = self._llm, None
        task, self._stats_task = self._stats_task, None
        if task is not None:
            task.cancel()
            # A queue read that completes as the cancel lands can swallow it: the loop then sees _llm gone.
            await asyncio.wait([task], timeout=STATS_TIMEOUT_S + STATS_IDLE_S)
        for h in list(self._handles.values()):
            self._abort_handle(h)
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)

    def _params(self, p: SamplingParams, prompt_len: int) -> Any:
        kw: dict[str, Any] = {
            "max_tokens": max(1, min(p.max_tokens, self.max_model_len - prompt_len)),
            "end_id": self._end_id,
            "pad_id": self._end_id,
            "ignore_eos": p.ignore_eos,
            "detokenize": False,  # TextStream detokenizes with our tokenizer
        }
        if self._more_eos and not p.ignore_eos:
            kw["stop_token_ids"] = list(self._more_eos)
        if p.temperature > 0:
            kw["temperature"] = p.temperature
            kw["top_p"] = p.top_p
            if p.top_k > 0:
                kw["top_k"] = p.top_k
            if p.min_p > 0:
                kw["min_p"] = p.min_p  # the LLM API's SamplingParams.min_p, scaled by the top token as ours
            # None would be the runtime's fixed default seed: every unseeded request would sample alike.
            kw["seed"] = p.seed if p.seed is not None else secrets.randbits(63)
        else:
            kw["top_k"] = 1  # greedy in every version of the LLM API
        # Only when asked for: the LLM API's SamplingParams spells these three as we do.
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(p, name) != 0.0:
                kw[name] = getattr(p, name)
        if p.repetition_penalty != 1.0:
            kw["repetition_penalty"] = p.repetition_penalty
        guided = self._guided(p.constraint)
        if guided is not None:
            kw["guided_decoding"] = guided
        return self._trt.SamplingParams(**kw)

    def _guided(self, c: Constraint | None) -> Any:
        """The LLM API's GuidedDecodingParams for a response format (adapter.guide_args), or None."""
        args = guide_args(c)
        if args is None:
            return None
        from tensorrt_llm.llmapi import GuidedDecodingParams

        if "choice" in args:  # the LLM API has no choice guide: the choices as a grammar
            from switchyard.libs.engine.grammar import choice_ebnf

            args = {"grammar": choice_ebnf(args["choice"])}
        return GuidedDecodingParams(**args)

    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        check_constraint(params.constraint, self.config.grammar_limits)  # ConstraintError: the caller's 400
        # logit_bias and logprobs are not passed to the LLM API (yet): refused, never dropped.
        unserved = bool(params.logit_bias) or params.logprobs is not None
        servable = self._llm is not None and 0 < len(ids) < self.max_model_len and not unserved
        end = early_end(request_id, ids, servable, self._cancels)
        if end is not None:
            yield end
            return
        req = _Req(len(ids))
        text = TextStream(self.tokenizer, params.stop, self.tokenizer.eos_token_ids)
        handle: Any = None
        self._m.running += 1
        try:
            try:
                salt = {"cache_salt": params.cache_salt} if self._salted and params.cache_salt is not None else {}
                handle = self._llm.generate_async(
                    ids, sampling_params=self._params(params, len(ids)), streaming=True, **salt
                )
            except Exception as e:  # shutting down, or parameters its SamplingParams refuses
                log.warning("tensorrt_llm refused request %s: %s", request_id, e)
                yield self._final(request_id, req, handle, "", [], "error")
                return
            self._handles[request_id] = handle
            if self._cancels.take(request_id):
                handle.abort()
            async for out in handle:
                comp = out.outputs[0]
                new_ids = list(comp.token_ids_diff)
                req.seen(out, comp, new_ids)
                self._m.generated_tokens += len(new_ids)
                reason = FINISH_REASONS.get(comp.finish_reason or "", "error") if out.finished else None
                delta, end_reason = push_tokens(text, new_ids, reason)
                if end_reason is not None:  # on our stop string the library generates on until aborted
                    yield self._final(request_id, req, handle, delta, new_ids, end_reason)
                    return
                yield StreamChunk(request_id, delta, new_ids, token_at=req.last)
            yield self._final(request_id, req, handle, "", [], "error")  # ended without a final response
        except Exception as e:  # the executor's errors surface from __anext__
            log.warning("tensorrt_llm failed request %s: %s", request_id, e)
            yield self._final(request_id, req, handle, "", [], "error")
        finally:
            self._release(request_id, req, handle)

    def _final(self, request_id: str, req: _Req, handle: Any, text: str, ids: list[int], reason: str) -> StreamChunk:
        """The last chunk; the request is forgotten first (callers rarely close the iterator)."""
        self._release(request_id, req, handle)
        self._m.prefix_cache_queries_tokens += req.prompt
        self._m.prefix_cache_hits_tokens += req.cached
        return req.final(request_id, text, ids, reason)

    @staticmethod
    def _abort_handle(handle: Any) -> None:
        if not handle.finished and not handle.aborted():
            handle.abort()

    def _release(self, request_id: str, req: _Req, handle: Any) -> None:
        """Forget a request (aborting it if it is still generating: our stop string, or the caller left)."""
        if not req.release():
            return
        self._m.running -= 1
        self._cancels.discard(request_id)
        if handle is None or self._handles.get(request_id) is not handle:
            return
        self._abort_handle(handle)
        del self._handles[request_id]

    def cancel(self, request_id: str) -> None:
        """Thread-safe: the abort itself runs on the engine's loop (the library's client is not thread-safe)."""
        self._cancels.add(request_id)
        call_on_loop(self._loop, self._abort_now, request_id)

    def _abort_now(self, request_id: str) -> None:
        h = self._handles.get(request_id)
        if h is not None:
            self._cancels.take(request_id)
            self._abort_handle(h)

    async def _follow_stats(self) -> None:
        """Engine-wide figures (KV blocks, queue, batch) from the library's iteration stats."""
        while self._llm is not None:
            try:
                async for stat in self._llm.get_stats_async(timeout=STATS_TIMEOUT_S):
                    if self._llm is None:
                        break
                    self._apply_stats(json.loads(stat) if isinstance(stat, str) else stat)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a stats hiccup never stops serving
                log.warning("tensorrt_llm stats: %s", e)
            await asyncio.sleep(STATS_IDLE_S)

    def _apply_stats(self, stat: dict[str, Any]) -> None:
        m = self._m
        kv = stat.get("kvCacheStats") or {}
        m.kv_blocks_used = int(kv.get("usedNumBlocks", m.kv_blocks_used))
        m.kv_blocks_free = int(kv.get("freeNumBlocks", m.kv_blocks_free))
        m.waiting = int(stat.get("numQueuedRequests", m.waiting))
        batch = (stat.get("inflightBatchingStats") or {}).get("numScheduledRequests")
        if batch is None:
            batch = stat.get("numActiveRequests", m.last_batch_size)
        m.last_batch_size = int(batch)
        m.max_batch_size_seen = max(m.max_batch_size_seen, m.last_batch_size)
        m.steps = max(m.steps, int(stat.get("iter", m.steps)))

    def metrics(self) -> EngineMetrics:
        return EngineMetrics(**vars(self._m))


class _Req(RequestStats):
    """One request's counts and times: ours (monotonic) unless the library's perf metrics say better."""

    def __init__(self, prompt: int) -> None:
        super().__init__(prompt)
        self.perf: Any = None

    def seen(self, out: Any, comp: Any, new_ids: list[int]) -> None:
        # 0 until the first response: read on every one, keep the last.
        self.cached = int(getattr(out, "cached_tokens", 0) or 0)
        self.perf = getattr(comp, "request_perf_metrics", None) or self.perf
        self.tokens(new_ids)

    def timings(self) -> tuple[float | None, float | None]:
        ttft, tpot = super().timings()
        timing = getattr(self.perf, "timing_metrics", None)
        if timing is not None and self.n:
            arrival = timing.arrival_time.total_seconds()
            first, last = timing.first_token_time.total_seconds(), timing.last_token_time.total_seconds()
            if arrival > 0 and first >= arrival:
                ttft = first - arrival
            if self.n > 1 and last >= first > 0:
                tpot = (last - first) / (self.n - 1)
        return ttft, tpot
