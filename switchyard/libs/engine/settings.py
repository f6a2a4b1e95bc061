"""The engine's knobs that come from the environment (SWITCHYARD_*), as one pydantic-settings class.

An entry point builds it once (the inference service's settings hold one) and applies it to the
EngineConfig it passes down; nothing else in switchyard/libs/engine reads the environment."""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field

from switchyard.libs.constraints import GrammarLimits
from switchyard.libs.engine.types import EngineConfig
from switchyard.libs.tokenizer import TokenizerSettings


class EngineSettings(TokenizerSettings):
    # SWITCHYARD_ENGINE_THREADS: torch intra-op threads of the step loop; 0 => cores - 1 for a step of more
    # than SWITCHYARD_ENGINE_WIDE_STEP_BATCH sequences; a smaller one takes every core while that measures
    # faster (SWITCHYARD_ENGINE_ADAPTIVE_THREADS, default on), or always (off).
    engine_threads: int = 0
    engine_wide_step_batch: int | None = None
    engine_adaptive_threads: bool | None = None
    # SWITCHYARD_ENGINE_STEP_NICE: niceness of the step thread, so the pipeline's processes preempt it.
    engine_step_nice: int | None = None
    # SWITCHYARD_KERNEL_ISA: 'auto' | 'avx512' (no AMX tiles) | 'avx2' (no AVX-512 VNNI either); see EngineConfig.
    kernel_isa: Literal["auto", "avx512", "avx2"] = "auto"
    # SWITCHYARD_KV_CACHE_BYTES: KV budget when the config leaves num_blocks at 0.
    kv_cache_bytes: int = 1 << 30
    # SWITCHYARD_TRTLLM_MODEL: the HF checkpoint the TensorRT-LLM kind serves for a GGUF model (`export-hf`
    # writes one); a model whose path is a directory is served as it is.
    trtllm_model: str | None = None
    # The vllm kind (switchyard/libs/engine/vllm_engine.py); the KV budget is SWITCHYARD_KV_CACHE_BYTES, as vLLM's
    # kv_cache_memory_bytes (what its CPU build's VLLM_CPU_KVCACHE_SPACE, in GiB, would set; that one,
    # when set, wins inside vLLM).
    # SWITCHYARD_VLLM_MODEL: the HF checkpoint it serves for a GGUF model; None => written once from the GGUF
    # (cache dir). A model whose path is a directory is served as it is.
    vllm_model: str | None = None
    # SWITCHYARD_VLLM_ENFORCE_EAGER: skip the start-up compile (minutes on 2 cores; ~10 % slower decode).
    vllm_enforce_eager: bool = False
    # SWITCHYARD_VLLM_DTYPE: float32 on AVX2 CPUs (bf16 is emulated there, and slower); bfloat16 on GPUs.
    vllm_dtype: str = "float32"
    # SWITCHYARD_VLLM_TENSOR_PARALLEL_SIZE: GPUs one replica spans.
    vllm_tensor_parallel_size: int = 1
    # SWITCHYARD_GRAMMAR_*: bounds on constraints, checked again before the native engine compiles one, and
    # its compile time and cache budget (switchyard/libs/constraints/limits.py; the gateway reads the same ones).
    grammar: GrammarLimits = Field(default_factory=GrammarLimits)

    # SWITCHYARD_SIM_TTFT_MS, SWITCHYARD_SIM_TPOT_MS, SWITCHYARD_SIM_STEP_TABLE: the simulated engine's
    # timing (EngineConfig; switchyard/libs/engine/sim.py cites the published figure behind the defaults).
    sim_ttft_ms: float | None = None
    sim_tpot_ms: float | None = None
    sim_step_table: str | None = None

    def apply(self, config: EngineConfig) -> EngineConfig:
        """`config` with this environment's knobs filled in; what the config sets itself wins."""
        default = EngineConfig()
        return dataclasses.replace(
            config,
            model_path=config.model_path or self.model_path,
            threads=config.threads or self.engine_threads,
            wide_step_batch=config.wide_step_batch
            if self.engine_wide_step_batch is None
            else self.engine_wide_step_batch,
            adaptive_threads=config.adaptive_threads
            if self.engine_adaptive_threads is None
            else self.engine_adaptive_threads,
            step_nice=config.step_nice if self.engine_step_nice is None else self.engine_step_nice,
            kv_cache_bytes=(
                self.kv_cache_bytes if config.kv_cache_bytes == default.kv_cache_bytes else config.kv_cache_bytes
            ),
            tokenizer_cache_dir=config.tokenizer_cache_dir
            if config.tokenizer_cache_dir is not None
            else self.tokenizer_cache,
            trtllm_model=config.trtllm_model or self.trtllm_model,
            kernel_isa=self.kernel_isa if config.kernel_isa == default.kernel_isa else config.kernel_isa,
            sim_ttft_ms=config.sim_ttft_ms if self.sim_ttft_ms is None else self.sim_ttft_ms,
            sim_tpot_ms=config.sim_tpot_ms if self.sim_tpot_ms is None else self.sim_tpot_ms,
            sim_step_table=config.sim_step_table if self.sim_step_table is None else self.sim_step_table,
            grammar_limits=(self.grammar if config.grammar_limits == default.grammar_limits else config.grammar_limits),
        )

    def vllm_config(self, config: EngineConfig) -> EngineConfig:
        """`config` (already applied) with this environment's vLLM knobs: a VllmEngineConfig."""
        from switchyard.libs.engine.vllm_engine import VllmEngineConfig

        return VllmEngineConfig.of(
            config,
            vllm_model=getattr(config, "vllm_model", None) or self.vllm_model,
            enforce_eager=getattr(config, "enforce_eager", False) or self.vllm_enforce_eager,
            vllm_dtype=self.vllm_dtype,
            tensor_parallel_size=self.vllm_tensor_parallel_size,
        )
