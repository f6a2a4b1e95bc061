"""The engine's environment knobs reach it only through EngineSettings, applied to an EngineConfig."""

import os

import pytest
from pydantic import ValidationError

from switchyard.libs.engine import EngineConfig, EngineSettings
from switchyard.libs.engine.engine import engine_threads


def test_the_environment_fills_what_the_config_leaves_unset(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_ENGINE_THREADS", "3")
    monkeypatch.setenv("SWITCHYARD_KV_CACHE_BYTES", str(1 << 20))
    monkeypatch.setenv("SWITCHYARD_MODEL_PATH", "/models/env.gguf")
    monkeypatch.setenv("SWITCHYARD_TOKENIZER_CACHE", "")
    monkeypatch.setenv("SWITCHYARD_TRTLLM_MODEL", "org/model")
    monkeypatch.setenv("SWITCHYARD_KERNEL_ISA", "avx2")
    monkeypatch.setenv("SWITCHYARD_GRAMMAR_MAX_REF_DEPTH", "8")
    env = EngineSettings()
    c = env.apply(EngineConfig(dtype="fp32"))
    assert (c.threads, c.kv_cache_bytes, c.model_path, c.tokenizer_cache_dir, c.trtllm_model) == (
        3,
        1 << 20,
        "/models/env.gguf",
        "",
        "org/model",
    )
    assert c.dtype == "fp32" and c.kernel_isa == "avx2"
    assert c.grammar_limits.max_ref_depth == 8 and c.grammar_limits.max_depth == 64
    # What the config sets itself (a service's own setting) wins over the shared environment.
    own = env.apply(EngineConfig(model_path="/models/own.gguf", threads=2, kv_cache_bytes=5 << 20))
    assert (own.model_path, own.threads, own.kv_cache_bytes) == ("/models/own.gguf", 2, 5 << 20)


def test_an_empty_environment_changes_nothing(monkeypatch):
    names = ("ENGINE_THREADS", "KV_CACHE_BYTES", "MODEL_PATH", "TOKENIZER_CACHE", "TRTLLM_MODEL", "KERNEL_ISA")
    for name in names:
        monkeypatch.delenv(f"SWITCHYARD_{name}", raising=False)
    assert EngineSettings().apply(EngineConfig()) == EngineConfig()


def test_threads_default_to_all_cores_but_one():
    assert engine_threads(0) == max(1, (os.cpu_count() or 2) - 1)
    assert engine_threads(5) == 5


def test_an_unknown_kernel_isa_is_refused_at_start_up(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_KERNEL_ISA", "amx")
    with pytest.raises(ValidationError, match="kernel_isa"):
        EngineSettings()
