"""The model registry: which models are served, by which pool and engine, with which capabilities."""

from switchyard.libs.models.registry import (
    GEMMA_MODEL_NAME,
    Capability,
    ModelCard,
    ModelRegistry,
    default_models,
    ensure_model_file,
)

__all__ = ["GEMMA_MODEL_NAME", "Capability", "ModelCard", "ModelRegistry", "default_models", "ensure_model_file"]
