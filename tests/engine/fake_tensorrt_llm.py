"""A fake `tensorrt_llm` (the LLM API, PyTorch backend) that raises where the real library raises.

TensorRT-LLM cannot be installed on any machine these tests run on, so the adapter meets this
instead. It was written from the signatures and checks read in NVIDIA/TensorRT-LLM's own source
(read with the search tools, nothing copied; these are the stored versions that were read):

- tensorrt_llm/llmapi/llm.py @ 4c05a74891e4df8066f08ed4ce14b0972abe4e25: `LLM` is `_TorchLLM`; unknown
  keyword arguments raise ValueError ("LLM got invalid argument: ..."); `generate_async` raises
  RuntimeError("LLM is shutting down") once the executor is gone, fills `end_id` from the tokenizer
  (and encodes stop strings) only when `end_id` is None, and on the PyTorch backend raises ValueError
  for a prompt longer than `max_num_tokens` unless `enable_chunked_prefill`; `get_stats_async(timeout)`
  yields iteration-stat dicts; `shutdown()`.
- tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412 (and a newer stored version
  for TorchLlmArgs): `KvCacheConfig` is a strict pydantic model (`enable_block_reuse=True`,
  `max_tokens=None`, `free_gpu_memory_fraction=0.9` in [0, 1], `tokens_per_block=32`); defaults
  `max_batch_size=2048`, `max_num_tokens=8192`, `enable_chunked_prefill=False`,
  `return_perf_metrics=False`, `enable_iter_perf_stats=False`.
- tensorrt_llm/sampling_params.py (the stored version whose `_validate` checks ranges; commit
  000a01de66f0eab4ab05640711f0253f50f5209c predates those checks): `@dataclass(slots=True, kw_only=True)`,
  `max_tokens=32`, `temperature`/`top_p`/`top_k`/`min_p`/`seed` default None (None: the runtime's default, a
  fixed seed 0), `ignore_eos`, `detokenize`; `_validate` raises for top_p outside [0, 1], top_k < 0,
  temperature < 0, best_of < n, and greedy with best_of > 1; stop strings left unencoded (end_id
  given, so `_setup` never ran) raise RuntimeError when the request is built. The real library builds
  it in its executor worker, so that error may reach the caller from the stream instead; this fake
  raises it from `generate_async` (the adapter turns either into an 'error' finish).
- tensorrt_llm/executor/result.py @ 005bc848893f575ec14b45d6b13139360d67c790: `CompletionOutput`
  (`token_ids_diff`, `text_diff`, finish_reason in stop/length/timeout/cancelled, `stop_reason`; a stop
  word's ids are cut from `token_ids` after the diff mark, so the final diff can be empty); the result
  is its own async iterator; errors reach the caller from `__anext__`; `abort()`, `aborted()` (a method),
  `finished` (a property).
- tensorrt_llm/serve/postprocess_handlers.py @ 01bf19231d29d8f0766e31c117d1cf39ed00d3d5: `rsp.cached_tokens`
  (0 until the first response), `output.request_perf_metrics.timing_metrics` / `.kv_cache_metrics`.

The "model" is a script: every request samples `LLM.script` in order, then the end token (which, as in
the real output, is not part of `token_ids`). `LLM.fail_after` makes the executor fail a request.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

_KV_FIELDS: dict[str, Any] = {
    "enable_block_reuse": True,
    "max_tokens": None,
    "max_attention_window": None,
    "sink_token_length": None,
    "free_gpu_memory_fraction": 0.9,
    "host_cache_size": None,
    "onboard_blocks": True,
    "event_buffer_max_size": 0,
    "enable_partial_reuse": True,
    "copy_on_partial_reuse": True,
    "use_uvm": False,
    "max_gpu_total_bytes": 0,
    "dtype": "auto",
    "tokens_per_block": 32,
}

# BaseLlmArgs and TorchLlmArgs fields (a subset: every name the adapter could plausibly pass is here).
_LLM_DEFAULTS: dict[str, Any] = {
    "max_batch_size": 2048,
    "max_num_tokens": 8192,
    "max_seq_len": None,
    "max_input_len": 1024,
    "max_beam_width": 1,
    "enable_chunked_prefill": False,
    "return_perf_metrics": False,
    "enable_iter_perf_stats": False,
    "enable_iter_req_stats": False,
    "stream_interval": 1,
    "kv_cache_config": None,
    "scheduler_config": None,
    "guided_decoding_backend": None,
    "gather_generation_logits": False,
    "pipeline_parallel_size": 1,
    "context_parallel_size": 1,
    "gpus_per_node": None,
    "enable_attention_dp": False,
    "disable_overlap_scheduler": False,
    "cuda_graph_config": None,
    "attn_backend": "TRTLLM",
    "sampler_type": "auto",
    "print_iter_log": False,
    "perf_metrics_max_requests": 0,
    "load_format": "auto",
    "checkpoint_format": None,
    "speculative_config": None,
    "lora_config": None,
    "enable_lora": False,
    "num_postprocess_workers": 0,
    "postprocess_tokenizer_dir": None,
    "reasoning_parser": None,
    "backend": None,
}
_GGUF_MAGIC = b"GGUF"


class KvCacheConfig:
    """Strict like the pydantic model: an unknown field or a fraction outside [0, 1] raises ValueError."""

    def __init__(self, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in _KV_FIELDS:
                raise ValueError(f"KvCacheConfig: {key}: Extra inputs are not permitted")
        for key, default in _KV_FIELDS.items():
            setattr(self, key, kwargs.get(key, default))
        frac = self.free_gpu_memory_fraction
        if frac is not None and not 0 <= frac <= 1:
            raise ValueError(f"KvCacheConfig: free_gpu_memory_fraction must be in [0, 1], got {frac}")


@dataclass(slots=True, kw_only=True)
class GuidedDecodingParams:
    """As tensorrt_llm/sampling_params.py @ 000a01de: one guide per request (`_validate` raises otherwise)."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False
    structural_tag: str | None = None

    def _validate(self) -> None:
        guides = sum(
            bool(getattr(self, name)) for name in ("json", "regex", "grammar", "json_object", "structural_tag")
        )
        if guides > 1:
            raise ValueError(f"Only one guide can be used for a request, but got {guides}.")


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    min_p: float | None = None
    logprobs: int | None = None
    return_perf_metrics: bool = False
    guided_decoding: GuidedDecodingParams | None = None
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    skip_special_tokens: bool = True
    _stop_word_ids: list[list[int]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id
        self.best_of = self.best_of or self.n
        self._validate()

    def _validate(self) -> None:
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"require 0 <= top_p <= 1, got top_p={self.top_p}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"require top_k >= 0, got top_k={self.top_k}")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError(f"require temperature >= 0, got temperature={self.temperature}")
        assert self.best_of is not None
        if self.best_of < self.n:
            raise ValueError(f"best_of ({self.best_of}) cannot be less than n ({self.n})")
        if self.best_of > 1 and self.greedy:
            raise ValueError("Greedy decoding in the LLM API does not allow multiple returns.")

    @property
    def greedy(self) -> bool:
        t, p, k = self.temperature, self.top_p, self.top_k
        return not self.use_beam_search and ((t is None and p is None and k is None) or k == 1 or p == 0.0 or t == 0)

    def _setup(self, tokenizer: Any) -> None:
        if self.end_id is None:
            self.end_id = tokenizer.eos_token_id
            self.pad_id = self.pad_id if self.pad_id is not None else self.end_id
        if self.stop is not None:
            strs = [self.stop] if isinstance(self.stop, str) else self.stop
            self._stop_word_ids = [tokenizer.encode(s) for s in strs]

    def _stop_words(self) -> list[tuple[int | str, list[int]]]:
        words: list[tuple[int | str, list[int]]] = [(i, [i]) for i in self.stop_token_ids or []]
        if self.stop is None:
            return words
        if self._stop_word_ids is None:
            raise RuntimeError(
                f"SamplingParams.stop ({self.stop}) is not processed by tokenizer, please call the setup method."
            )
        strs = [self.stop] if isinstance(self.stop, str) else self.stop
        return words + list(zip(strs, self._stop_word_ids, strict=True))


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    request_perf_metrics: Any = None
    _last_text_len: int = field(default=0, init=False, repr=False)
    _last_token_ids_len: int = field(default=0, init=False, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len :]

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len :]


class RequestError(RuntimeError):
    """What the executor's background error handler raises into the reader."""


@dataclass
class _Response:
    tokens: list[int]
    finish: str | None = None  # 'end_id' | 'stop_words' | 'length' | 'cancelled'
    cached: int = 0
    perf: Any = None
    error: str | None = None


class RequestOutput:
    def __init__(self, llm: LLM, request_id: int, prompt: list[int], params: SamplingParams, streaming: bool) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt
        self.sampling_params = params
        self.cached_tokens = 0
        self._llm = llm
        self._streaming = streaming
        self._outputs = [CompletionOutput(0)]
        self._queue: asyncio.Queue[_Response] = asyncio.Queue()
        self._done = False
        self._aborted = False
        self.abort_threads: list[int] = []

    @property
    def outputs(self) -> list[CompletionOutput]:
        return self._outputs

    @property
    def finished(self) -> bool:
        return self._done

    def abort(self) -> None:
        self.abort_threads.append(threading.get_ident())
        self._llm._abort_request(self.request_id)
        self._aborted = True

    def aborted(self) -> bool:
        return self._aborted

    def __aiter__(self) -> RequestOutput:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        rsp = await self._queue.get()
        if rsp.error is not None:
            raise RequestError(rsp.error)
        self._handle(rsp)
        return self

    def _handle(self, rsp: _Response) -> None:
        out = self._outputs[0]
        self.cached_tokens = rsp.cached
        out._last_token_ids_len = len(out.token_ids)
        out.token_ids.extend(rsp.tokens)
        if rsp.perf is not None:
            out.request_perf_metrics = rsp.perf
        if rsp.finish is not None:
            self._done = True
            if rsp.finish == "stop_words":
                out.finish_reason = "stop"
                for reason, ids in self.sampling_params._stop_words():
                    if out.token_ids[-len(ids) :] == ids:
                        out.stop_reason = reason
                        if not self.sampling_params.include_stop_str_in_output:
                            out.token_ids = out.token_ids[: -len(ids)]
                        break
            else:
                out.finish_reason = {"end_id": "stop"}.get(rsp.finish, rsp.finish)
        tok = self._llm.tokenizer
        if self.sampling_params.detokenize and tok is not None:
            out._last_text_len = len(out.text)
            out.text = tok.decode(out.token_ids)


class _IterationStats:
    """`get_stats_async`'s answer: yields the stats queued so far, then waits `timeout` for more."""

    def __init__(self, queue: asyncio.Queue[dict[str, Any]], drained: asyncio.Event, timeout: float) -> None:
        self._queue, self._drained, self._timeout = queue, drained, timeout

    def __aiter__(self) -> _IterationStats:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self._timeout):
                stat = await self._queue.get()
            if self._queue.empty():
                self._drained.set()
            return stat
        except TimeoutError:
            raise StopAsyncIteration from None


class LLM:
    script: list[int] = []
    fail_after: int | None = None  # the executor fails a request after this many tokens
    directory_tokenizer: Any = None  # stands in for the tokenizer the library loads from the checkpoint
    instances: list[LLM] = []

    def __init__(
        self,
        model: str | os.PathLike[str],
        tokenizer: Any = None,
        tokenizer_mode: str = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        **kwargs: Any,
    ) -> None:
        for key in kwargs:
            if key not in _LLM_DEFAULTS:
                raise ValueError(f"LLM got invalid argument: {key}")
        path = os.fspath(model)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                kind = "a GGUF file" if f.read(4) == _GGUF_MAGIC else "a file"
            raise ValueError(f"{path} is {kind}, not a Hugging Face checkpoint directory")
        if not os.path.isdir(path):
            raise OSError(f"{path} is no local directory and the Hugging Face Hub cannot be reached")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise OSError(f"{path} has no config.json")
        with open(os.path.join(path, "config.json")) as f:
            self.hf_config = json.load(f)
        self.model = path
        self.args = types.SimpleNamespace(**{**_LLM_DEFAULTS, **kwargs})
        if self.args.guided_decoding_backend not in (None, "xgrammar", "llguidance"):
            raise ValueError(f"Unrecognized guided decoding backend {self.args.guided_decoding_backend}")
        if self.args.kv_cache_config is None:
            self.args.kv_cache_config = KvCacheConfig()
        self.tokenizer = None if skip_tokenizer_init else (tokenizer or LLM.directory_tokenizer)
        self.requests: list[RequestOutput] = []
        self._shut_down = False
        self._active: dict[int, dict[str, Any]] = {}
        self._aborts: set[int] = set()
        self._next_id = 0
        self._iter = 0
        # (the request's cache_salt, a prefix of whole blocks): a salt limits reuse to requests with the same one.
        self._cached_blocks: set[tuple[str | None, tuple[int, ...]]] = set()
        self._reused = self._missed = 0
        self._stats: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.stats_drained = asyncio.Event()  # set when a reader has taken every iteration's stats
        self._work = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_task: asyncio.Task[None] | None = None
        LLM.instances.append(self)

    # -- the API ------------------------------------------------------------------------------
    def generate_async(
        self,
        inputs: Any,
        sampling_params: SamplingParams | None = None,
        streaming: bool = False,
        cache_salt: str | None = None,
        **_: Any,
    ) -> RequestOutput:
        if self._shut_down:
            raise RuntimeError("LLM is shutting down")
        sp = SamplingParams() if sampling_params is None else sampling_params
        if not isinstance(sp, SamplingParams):
            raise TypeError(f"The sampling_params must be type SamplingParams or None, but got {type(sp)}")
        if sp.end_id is None:
            if self.tokenizer is None:
                raise ValueError("tokenizer is required to reset end_id if it is None")
            sp._setup(self.tokenizer)
        sp.return_perf_metrics = sp.return_perf_metrics or self.args.return_perf_metrics
        if isinstance(inputs, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs the tokenizer")
            prompt = list(self.tokenizer.encode(inputs))
        elif isinstance(inputs, list) and all(isinstance(t, int) for t in inputs):
            prompt = list(inputs)
        else:
            raise TypeError(f"The inputs must be type str or list of int, but got {type(inputs)}")
        limit = self.args.max_num_tokens
        if not self.args.enable_chunked_prefill and limit and len(prompt) > limit:
            raise ValueError(
                f"The sum of prompt length ({len(prompt)}), query length (0) should not exceed max_num_tokens ({limit})"
            )
        sp._stop_words()  # building the executor request reads them
        if sp.guided_decoding is not None:
            sp.guided_decoding._validate()
            if self.args.guided_decoding_backend is None:
                # Not read in the library: this fake refuses a guide the LLM was not built to apply.
                raise ValueError("guided decoding needs an LLM built with guided_decoding_backend")
        self._next_id += 1
        req = RequestOutput(self, self._next_id, prompt, sp, streaming)
        self.requests.append(req)
        self._active[req.request_id] = {
            "salt": cache_salt,
            "req": req,
            "n": 0,
            "seq": [],
            "arrival": time.monotonic(),
            "first": None,
            "cached": None,
        }
        if self._loop_task is None:
            self._loop = asyncio.get_running_loop()
            self._loop_task = self._loop.create_task(self._run())
        self._work.set()
        return req

    def get_stats_async(self, timeout: float | None = 2) -> _IterationStats:
        return _IterationStats(self._stats, self.stats_drained, timeout or 2)

    def shutdown(self) -> None:
        self._shut_down = True
        self._on_loop(self._fail_all)

    def _fail_all(self) -> None:
        for st in list(self._active.values()):
            st["req"]._queue.put_nowait(_Response([], error="executor shut down"))
        self._active.clear()
        self._work.set()

    def _on_loop(self, fn: Any) -> None:
        """The executor's state is touched on its own loop only (callers may be on other threads)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            fn()
        else:
            loop.call_soon_threadsafe(fn)

    # -- the executor -------------------------------------------------------------------------
    def _abort_request(self, request_id: int) -> None:
        self._aborts.add(request_id)
        self._on_loop(self._work.set)

    @property
    def _tokens_per_block(self) -> int:
        return int(self.args.kv_cache_config.tokens_per_block)

    def _prefix_blocks(self, ids: list[int]) -> list[tuple[int, ...]]:
        b = self._tokens_per_block
        return [tuple(ids[: i + b]) for i in range(0, len(ids) - b + 1, b)]

    async def _run(self) -> None:
        while not self._shut_down:
            await asyncio.sleep(0)
            if not self._active:
                self._work.clear()
                await self._work.wait()
                continue
            self._iter += 1
            for rid, st in list(self._active.items()):
                self._step(rid, st)
            if self.args.enable_iter_perf_stats:
                self.stats_drained.clear()
                self._stats.put_nowait(self._iteration_stats())

    def _step(self, rid: int, st: dict[str, Any]) -> None:
        req: RequestOutput = st["req"]
        sp = req.sampling_params
        if rid in self._aborts:
            self._finish(rid, st, _Response([], "cancelled"))
            return
        if st["cached"] is None:  # the context phase: reuse whole blocks of an earlier prompt
            hit = 0
            if self.args.kv_cache_config.enable_block_reuse:
                for block in self._prefix_blocks(req.prompt_token_ids[:-1]):
                    if (st["salt"], block) not in self._cached_blocks:
                        break
                    hit = len(block)
            st["cached"] = hit
            self._reused += hit // self._tokens_per_block
            self._missed += len(self._prefix_blocks(req.prompt_token_ids)) - hit // self._tokens_per_block
        if LLM.fail_after is not None and st["n"] >= LLM.fail_after:
            req._queue.put_nowait(_Response([], error="executor failed the request"))
            del self._active[rid]
            return
        n = st["n"]
        if n < len(LLM.script):
            tok = LLM.script[n]
        elif sp.ignore_eos:
            tok = LLM.script[-1]
        else:
            self._finish(rid, st, _Response([], "end_id"))
            return
        st["n"] = n + 1
        now = time.monotonic()
        st["first"] = st["first"] or now
        seq = st["seq"]
        seq.append(tok)
        finish = None
        if any(seq[-len(ids) :] == ids for _, ids in sp._stop_words()):
            finish = "stop_words"
        elif st["n"] >= sp.max_tokens:
            finish = "length"
        rsp = _Response([tok], finish, st["cached"])
        if finish is not None:
            self._finish(rid, st, rsp)
        else:
            rsp.perf = self._perf(st, sp) if sp.return_perf_metrics else None
            req._queue.put_nowait(rsp)

    def _finish(self, rid: int, st: dict[str, Any], rsp: _Response) -> None:
        req: RequestOutput = st["req"]
        rsp.cached = st["cached"] or 0
        rsp.perf = self._perf(st, req.sampling_params) if req.sampling_params.return_perf_metrics else None
        req._queue.put_nowait(rsp)
        if self.args.kv_cache_config.enable_block_reuse:
            self._cached_blocks.update((st["salt"], b) for b in self._prefix_blocks(req.prompt_token_ids))
        self._aborts.discard(rid)
        del self._active[rid]

    def _perf(self, st: dict[str, Any], sp: SamplingParams) -> Any:
        now = time.monotonic()
        td = dt.timedelta
        timing = types.SimpleNamespace(
            arrival_time=td(seconds=st["arrival"]),
            first_scheduled_time=td(seconds=st["arrival"]),
            first_token_time=td(seconds=st["first"] or 0),
            last_token_time=td(seconds=now if st["first"] else 0),
        )
        b = self._tokens_per_block
        reused = (st["cached"] or 0) // b
        total = -(-(len(st["req"].prompt_token_ids) + st["n"]) // b)
        kv = types.SimpleNamespace(
            num_total_allocated_blocks=total,
            num_new_allocated_blocks=total - reused,
            num_reused_blocks=reused,
            num_missed_blocks=total - reused,
            kv_cache_hit_rate=reused / total if total else 0.0,
        )
        return types.SimpleNamespace(timing_metrics=timing, kv_cache_metrics=kv)

    def _iteration_stats(self) -> dict[str, Any]:
        b = self._tokens_per_block
        max_tokens = self.args.kv_cache_config.max_tokens or 1_000_000  # else 90 % of a GPU's free memory
        used = sum(-(-(len(st["req"].prompt_token_ids) + st["n"]) // b) for st in self._active.values())
        total = max_tokens // b
        return {
            "iter": self._iter,
            "numActiveRequests": len(self._active),
            "numQueuedRequests": 0,
            "maxNumActiveRequests": self.args.max_batch_size,
            "kvCacheStats": {
                "maxNumBlocks": total,
                "freeNumBlocks": total - used,
                "usedNumBlocks": used,
                "tokensPerBlock": b,
                "allocTotalBlocks": self._reused + self._missed,
                "allocNewBlocks": self._missed,
                "reusedBlocks": self._reused,
                "missedBlocks": self._missed,
                "cacheHitRate": self._reused / max(1, self._reused + self._missed),
            },
            "inflightBatchingStats": {"numScheduledRequests": len(self._active), "numContextRequests": 0},
        }


def install(monkeypatch: Any) -> types.ModuleType:
    """Put the fake in sys.modules as `tensorrt_llm` and `tensorrt_llm.llmapi` for one test."""
    mod = types.ModuleType("tensorrt_llm")
    api = types.ModuleType("tensorrt_llm.llmapi")
    mod.LLM = api.LLM = LLM  # type: ignore[attr-defined]
    mod.SamplingParams = api.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    api.GuidedDecodingParams = GuidedDecodingParams  # type: ignore[attr-defined]
    api.KvCacheConfig = KvCacheConfig  # type: ignore[attr-defined]
    api.RequestOutput = RequestOutput  # type: ignore[attr-defined]
    mod.llmapi = api  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorrt_llm", mod)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.llmapi", api)
    LLM.instances = []
    LLM.fail_after = None
    LLM.directory_tokenizer = None
    return mod
