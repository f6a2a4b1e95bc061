"""Pick an engine implementation; heavy modules are imported only for the kind selected."""

from __future__ import annotations

from libs.engine.types import AsyncEngine, EngineConfig
from libs.tokenizer.paths import default_model_path

__all__ = ["create_engine", "default_model_path"]


def create_engine(config: EngineConfig) -> AsyncEngine:
    if config.kind == "native":
        from libs.engine.engine import NativeEngine

        return NativeEngine(config)
    if config.kind == "tensorrt_llm":
        from libs.engine.trtllm import TrtLlmEngine

        return TrtLlmEngine(config)
    if config.kind == "vllm":
        from libs.engine.vllm_engine import VllmEngine

        return VllmEngine(config)
    if config.kind == "sim":
        from libs.engine.sim import SimEngine

        return SimEngine(config)
    raise ValueError(f"unknown engine kind {config.kind!r}")
