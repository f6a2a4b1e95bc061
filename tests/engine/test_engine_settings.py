"""The engine's environment knobs reach it only through EngineSettings, applied to an EngineConfig."""

import os
import threading

import pytest
from pydantic import ValidationError

from switchyard.libs.engine import EngineConfig, EngineSettings
from switchyard.libs.engine.engine import _lower_priority
from switchyard.libs.engine.threads import engine_threads, step_threads


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


def test_a_small_step_takes_every_core_and_a_large_one_leaves_one():
    cores = os.cpu_count() or 1
    assert step_threads(0, batch=1, wide_batch=1) == cores
    assert step_threads(0, batch=2, wide_batch=1) == max(1, cores - 1)
    assert step_threads(0, batch=4, wide_batch=4) == cores
    assert step_threads(3, batch=1, wide_batch=8) == 3  # a fixed count wins


def test_the_step_policy_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_ENGINE_WIDE_STEP_BATCH", "4")
    monkeypatch.setenv("SWITCHYARD_ENGINE_STEP_NICE", "0")
    c = EngineSettings().apply(EngineConfig())
    assert (c.wide_step_batch, c.step_nice) == (4, 0)


def test_the_step_thread_is_niced_and_other_threads_are_not():
    seen: dict[str, int] = {}

    def step_thread() -> None:
        _lower_priority(3)
        seen["step"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = threading.Thread(target=step_thread)
    t.start()
    t.join()
    assert seen["step"] == min(19, before + 3)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_an_unknown_kernel_isa_is_refused_at_start_up(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_KERNEL_ISA", "amx")
    with pytest.raises(ValidationError, match="kernel_isa"):
        EngineSettings()
