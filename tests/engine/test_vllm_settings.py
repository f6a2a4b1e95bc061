"""The vllm engine kind's settings, without vLLM: what the inference service would hand the adapter."""

from __future__ import annotations

from switchyard.libs.engine import EngineConfig, create_engine
from switchyard.libs.engine.vllm_engine import VllmEngine, VllmEngineConfig, hf_checkpoint_dir
from switchyard.services.inference.settings import InferenceSettings


def test_the_service_settings_build_a_vllm_config(monkeypatch, tmp_path):
    monkeypatch.setenv("SWITCHYARD_INFERENCE_ENGINE", "vllm")
    monkeypatch.setenv("SWITCHYARD_INFERENCE_MAX_NUM_SEQS", "8")
    monkeypatch.setenv("SWITCHYARD_VLLM_ENFORCE_EAGER", "1")
    monkeypatch.setenv("SWITCHYARD_VLLM_TENSOR_PARALLEL_SIZE", "2")
    monkeypatch.setenv("SWITCHYARD_KV_CACHE_BYTES", str(1 << 28))
    config = InferenceSettings(data_dir=str(tmp_path)).engine_config()
    assert isinstance(config, VllmEngineConfig) and config.kind == "vllm"
    assert config.enforce_eager and config.tensor_parallel_size == 2 and config.vllm_dtype == "float32"
    assert config.max_num_seqs == 8 and config.kv_cache_bytes == 1 << 28
    # No checkpoint configured: the one written from the GGUF, under the engine cache of the data dir.
    assert hf_checkpoint_dir(config, "/models/SmolLM2-135M-Instruct.Q4_1.gguf") == (
        f"{tmp_path}/cache/engine/hf/SmolLM2-135M-Instruct.Q4_1"
    )


def test_the_factory_takes_a_plain_config_for_the_vllm_kind():
    eng = create_engine(EngineConfig(kind="vllm", max_num_seqs=4))
    assert isinstance(eng, VllmEngine) and eng.config.max_num_seqs == 4 and not eng.config.enforce_eager
    assert eng.max_model_len <= eng.tokenizer.context_length
