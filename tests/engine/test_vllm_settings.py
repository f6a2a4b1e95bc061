"""The vllm engine kind's settings, without vLLM: what the inference service would hand the adapter."""

from __future__ import annotations

import pytest

from switchyard.libs.engine import EngineConfig, create_engine
from switchyard.libs.engine.vllm_engine import VllmEngine, VllmEngineConfig, hf_checkpoint_dir
from switchyard.services.inference.settings import InferenceSettings


def test_the_service_settings_build_a_vllm_config(monkeypatch, tmp_path):
    monkeypatch.setenv("SWITCHYARD_INFERENCE_ENGINE", "vllm")
    monkeypatch.setenv("SWITCHYARD_INFERENCE_MAX_NUM_SEQS", "8")
    monkeypatch.setenv("SWITCHYARD_VLLM_ENFORCE_EAGER", "1")
    monkeypatch.setenv("SWITCHYARD_VLLM_TENSOR_PARALLEL_SIZE", "2")
    monkeypatch.setenv("SWITCHYARD_KV_CACHE_BYTES", str(1 << 28))
    monkeypatch.setenv("SWITCHYARD_INFERENCE_SCHEDULING_POLICY", "fcfs")
    config = InferenceSettings(data_dir=str(tmp_path)).engine_config()
    assert isinstance(config, VllmEngineConfig) and config.kind == "vllm"
    assert config.enforce_eager and config.tensor_parallel_size == 2 and config.vllm_dtype == "float32"
    assert config.max_num_seqs == 8 and config.kv_cache_bytes == 1 << 28
    assert config.scheduling_policy == "fcfs" and config.priority_aging_s == 1.0  # vLLM's --scheduling-policy
    # No checkpoint configured: the one written from the GGUF, under the engine cache of the data dir.
    assert hf_checkpoint_dir(config, "/models/SmolLM2-135M-Instruct.Q4_1.gguf") == (
        f"{tmp_path}/cache/engine/hf/SmolLM2-135M-Instruct.Q4_1"
    )


def test_the_factory_takes_a_plain_config_for_the_vllm_kind():
    eng = create_engine(EngineConfig(kind="vllm", max_num_seqs=4))
    assert isinstance(eng, VllmEngine) and eng.config.max_num_seqs == 4 and not eng.config.enforce_eager
    assert eng.max_model_len <= eng.tokenizer.context_length


def test_a_directory_model_is_served_as_it_is_with_its_own_tokenizer(tmp_path):
    from switchyard.libs.engine.vllm_engine import ensure_hf_checkpoint
    from switchyard.libs.tokenizer import load_tokenizer
    from tests.hf_models import write_tokenizer

    model = tmp_path / "my-model"
    write_tokenizer(model)
    (model / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 1024}')
    (model / "generation_config.json").write_text('{"eos_token_id": [2, 0]}')
    config = VllmEngineConfig(model_path=str(model), vllm_model=str(tmp_path / "other"), cache_dir=str(tmp_path))
    eng = create_engine(config)
    assert isinstance(eng, VllmEngine)
    # The directory itself, whatever SWITCHYARD_VLLM_MODEL says; nothing to convert.
    assert eng.hf_model == str(model) and eng.gguf is None
    assert ensure_hf_checkpoint(eng.hf_model, eng.gguf) == str(model) and not (tmp_path / "hf").exists()
    assert eng.tokenizer is load_tokenizer(str(model)) and eng.model_name == "my-model"
    assert eng.max_model_len == 1024 and eng.tokenizer.eos_token_ids == {0, 2}
    assert sorted(eng._eos) == [0, 2]  # the stop ids vLLM is sent (test_vllm_hf_dir.py runs them for real)

    (model / "config.json").unlink()
    with pytest.raises(ValueError, match=r"no config\.json"):
        ensure_hf_checkpoint(eng.hf_model, eng.gguf)
