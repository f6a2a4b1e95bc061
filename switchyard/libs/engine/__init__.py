"""Paged-KV inference engine. Cheap to import: torch-heavy modules load inside create_engine."""

from switchyard.libs.engine.factory import create_engine, default_model_path
from switchyard.libs.engine.settings import EngineSettings
from switchyard.libs.engine.types import (
    AsyncEngine,
    Constraint,
    EngineConfig,
    EngineMetrics,
    SamplingParams,
    StreamChunk,
    Usage,
)

__all__ = [
    "AsyncEngine",
    "Constraint",
    "EngineConfig",
    "EngineMetrics",
    "EngineSettings",
    "SamplingParams",
    "StreamChunk",
    "Usage",
    "create_engine",
    "default_model_path",
]
