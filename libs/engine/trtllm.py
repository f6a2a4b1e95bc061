"""AsyncEngine over TensorRT-LLM's LLM API (in-flight batching, KV block reuse on the GPU).

tensorrt_llm is imported only in start(), so this module loads (and its tests run) anywhere.
The GGUF file is still the source of the tokenizer and chat template; the TensorRT-LLM model
is an HF checkpoint (directory or hub name) given by EngineConfig.trtllm_model (SWITCHYARD_TRTLLM_MODEL
through EngineSettings) or model_path.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from libs.engine.request import TextStream
from libs.engine.types import Constraint, EngineConfig, EngineMetrics, SamplingParams, StreamChunk, Usage
from libs.tokenizer import Tokenizer, default_model_path, load_tokenizer

DEFAULT_HF_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


class TrtLlmEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        path = config.model_path or ""
        gguf = path if path.endswith(".gguf") else default_model_path()
        self.tokenizer: Tokenizer = load_tokenizer(gguf, config.tokenizer_cache_dir)
        self.model_name = self.tokenizer.model_name
        self.max_model_len = min(config.max_model_len, self.tokenizer.context_length)
        self.hf_model = config.trtllm_model or (path if path and not path.endswith(".gguf") else DEFAULT_HF_MODEL)
        self._llm: Any = None
        self._trt: Any = None
        self._handles: dict[str, Any] = {}
        self._cancelled: set[str] = set()
        self._m = EngineMetrics()

    async def start(self) -> None:
        if self._llm is not None:
            return
        import tensorrt_llm
        from tensorrt_llm.llmapi import KvCacheConfig

        self._trt = tensorrt_llm
        kv = KvCacheConfig(enable_block_reuse=self.config.enable_prefix_caching)
        self._llm = await asyncio.to_thread(
            tensorrt_llm.LLM,
            model=self.hf_model,
            kv_cache_config=kv,
            max_batch_size=self.config.max_num_seqs,
            max_num_tokens=self.config.max_num_batched_tokens,
            # The same grammar library as the native engine: response formats are passed through.
            guided_decoding_backend="xgrammar",
        )

    async def stop(self) -> None:
        for h in list(self._handles.values()):
            h.abort()
        llm, self._llm = self._llm, None
        if llm is not None and hasattr(llm, "shutdown"):
            await asyncio.to_thread(llm.shutdown)

    def _params(self, p: SamplingParams) -> Any:
        kw: dict[str, Any] = {"max_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p}
        if p.top_k > 0:
            kw["top_k"] = p.top_k
        if p.seed is not None:
            kw["seed"] = p.seed
        if p.stop:
            kw["stop"] = list(p.stop)
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
        """The LLM API's GuidedDecodingParams for a response format. A tool constraint is not passed:
        its grammar starts inside the forced opening the prompt already ends with, which the LLM API
        cannot express; that opening alone is what a forced call gets here."""
        if c is None or c.kind == "tools":
            return None
        from tensorrt_llm.llmapi import GuidedDecodingParams

        from libs.engine.grammar import choice_ebnf

        if c.kind == "json_object":
            return GuidedDecodingParams(json_object=True)
        if c.kind == "json_schema":
            return GuidedDecodingParams(json=c.spec)
        if c.kind == "regex":
            return GuidedDecodingParams(regex=c.spec)
        return GuidedDecodingParams(grammar=choice_ebnf(json.loads(c.spec)))

    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncIterator[StreamChunk]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        # logit_bias and logprobs are not passed to the LLM API (yet): refused, never dropped.
        unserved = bool(params.logit_bias) or params.logprobs is not None
        if self._llm is None or not ids or len(ids) >= self.max_model_len or unserved:
            yield StreamChunk(request_id, "", [], finished=True, finish_reason="error")
            return
        t0 = time.monotonic()
        first = last = None
        n_out = 0
        cached = 0
        # Our own detokenizer and stop handling, so both engines stream identical text rules.
        text = TextStream(self.tokenizer, params.stop, self.tokenizer.eos_token_ids)
        handle = self._llm.generate_async(ids, sampling_params=self._params(params), streaming=True)
        self._handles[request_id] = handle
        self._m.running += 1
        reason = "error"
        try:
            async for out in handle:
                if request_id in self._cancelled:
                    reason = "cancelled"
                    break
                comp = out.outputs[0]
                new_ids = list(comp.token_ids_diff)
                cached = int(getattr(out, "cached_tokens", 0) or 0)
                if new_ids:
                    last = time.monotonic()
                    first = first or last
                    n_out += len(new_ids)
                    self._m.generated_tokens += len(new_ids)
                if out.finished:
                    reason = comp.finish_reason or "stop"
                    if reason not in ("stop", "length"):
                        reason = "stop"
                    delta = text.push(new_ids, final=True)
                    self._release(request_id, handle)
                    yield StreamChunk(
                        request_id,
                        delta,
                        new_ids,
                        True,
                        reason,
                        self._usage(len(ids), cached, n_out, t0, first, last),
                    )
                    return
                delta = text.push(new_ids)
                if text.stopped:
                    self._release(request_id, handle)
                    yield StreamChunk(
                        request_id,
                        delta,
                        new_ids,
                        True,
                        "stop",
                        self._usage(len(ids), cached, n_out, t0, first, last),
                    )
                    return
                yield StreamChunk(request_id, delta, new_ids)
            if request_id in self._cancelled:
                reason = "cancelled"
            self._release(request_id, handle)
            yield StreamChunk(request_id, "", [], True, reason, self._usage(len(ids), cached, n_out, t0, first, last))
        finally:
            self._release(request_id, handle)

    def _release(self, request_id: str, handle: Any) -> None:
        """Forget a request before its final chunk goes out (callers rarely close the iterator)."""
        if request_id not in self._handles or self._handles[request_id] is not handle:
            return
        if not handle.finished:
            handle.abort()
        del self._handles[request_id]
        self._cancelled.discard(request_id)
        self._m.running -= 1

    @staticmethod
    def _usage(prompt: int, cached: int, n: int, t0: float, first: float | None, last: float | None) -> Usage:
        tpot = (last - first) / (n - 1) if n > 1 and first is not None and last is not None else None
        return Usage(prompt, cached, n, None if first is None else first - t0, tpot)

    def cancel(self, request_id: str) -> None:
        h = self._handles.get(request_id)
        if h is not None:
            self._cancelled.add(request_id)
            h.abort()

    def metrics(self) -> EngineMetrics:
        return EngineMetrics(**vars(self._m))
