"""The model registry: which models are served, by which pool and engine, with which capabilities."""

from switchyard.libs.models.registry import GEMMA_MODEL_NAME, ModelRegistry, default_models, ensure_model_path
from switchyard.schemas.models import Capability, ModelCard

__all__ = ["GEMMA_MODEL_NAME", "Capability", "ModelCard", "ModelRegistry", "default_models", "ensure_model_path"]
