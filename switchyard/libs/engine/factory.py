"""Pick an engine implementation; heavy modules are imported only for the kind selected."""

from __future__ import annotations

from switchyard.libs.engine.types import AsyncEngine, EngineConfig
from switchyard.libs.tokenizer.paths import default_model_path

__all__ = ["create_engine", "default_model_path"]


def create_engine(config: EngineConfig) -> AsyncEngine:
    if config.kind == "native":
        from switchyard.libs.engine.engine import NativeEngine

        return NativeEngine(config)
    if config.kind == "tensorrt_llm":
        from switchyard.libs.engine.trtllm import TrtLlmEngine

        return TrtLlmEngine(config)
    if config.kind == "vllm":
        from switchyard.libs.engine.vllm_engine import VllmEngine

        return VllmEngine(config)
    if config.kind == "sim":
        from switchyard.libs.engine.sim import SimEngine

        return SimEngine(config)
    raise ValueError(f"unknown engine kind {config.kind!r}")
