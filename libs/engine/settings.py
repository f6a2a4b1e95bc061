"""The engine's knobs that come from the environment (SWITCHYARD_*), as one pydantic-settings class.

An entry point builds it once (the inference service's settings hold one) and applies it to the
EngineConfig it passes down; nothing else in libs/engine reads the environment."""

from __future__ import annotations

import dataclasses

from libs.engine.types import EngineConfig
from libs.tokenizer import TokenizerSettings


class EngineSettings(TokenizerSettings):
    # SWITCHYARD_ENGINE_THREADS: torch intra-op threads of the step loop; 0 => cores - 1.
    engine_threads: int = 0
    # SWITCHYARD_KV_CACHE_BYTES: KV budget when the config leaves num_blocks at 0.
    kv_cache_bytes: int = 1 << 30
    # SWITCHYARD_TRTLLM_MODEL: the HF checkpoint the TensorRT-LLM kind serves.
    trtllm_model: str | None = None

    def apply(self, config: EngineConfig) -> EngineConfig:
        """`config` with this environment's knobs filled in; what the config sets itself wins."""
        default = EngineConfig()
        return dataclasses.replace(
            config,
            model_path=config.model_path or self.model_path,
            threads=config.threads or self.engine_threads,
            kv_cache_bytes=(
                self.kv_cache_bytes if config.kv_cache_bytes == default.kv_cache_bytes else config.kv_cache_bytes
            ),
            tokenizer_cache_dir=config.tokenizer_cache_dir
            if config.tokenizer_cache_dir is not None
            else self.tokenizer_cache,
            trtllm_model=config.trtllm_model or self.trtllm_model,
        )
