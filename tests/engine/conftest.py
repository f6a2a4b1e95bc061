"""Session-wide fixtures: the real model is loaded once (fp32) and shared by every test."""

from __future__ import annotations

import functools
import os

import pytest
import torch

from switchyard.libs.engine.engine import NativeEngine
from switchyard.libs.engine.model import LlamaModel
from switchyard.libs.engine.types import EngineConfig
from switchyard.libs.engine.weights import LlamaConfig, load_weights, read_gguf
from switchyard.libs.tokenizer import default_model_path, load_tokenizer

CACHE_DIR = os.path.join("var", "cache", "engine")


@pytest.fixture(scope="session")
def model_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def tokenizer(model_path):
    return load_tokenizer(model_path)


@pytest.fixture(scope="session")
def fp32_model(model_path) -> LlamaModel:
    cfg, tensors = load_weights(model_path, "fp32", CACHE_DIR)
    return LlamaModel(cfg, tensors, "fp32")


@pytest.fixture(scope="session")
def hf_model(model_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import gguf

    # transformers rebuilds gguf's (pure) tensor-name map ~400 times and parses the file twice,
    # over a minute on this box; memoising both changes no value, only the load time.
    orig_map, orig_reader = gguf.get_tensor_name_map, gguf.GGUFReader
    readers: dict[str, object] = {}

    def cached_reader(path, *args, **kwargs):
        key = str(path)
        if key not in readers:
            readers[key] = orig_reader(path, *args, **kwargs)
        return readers[key]

    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(orig_map)
    gguf.GGUFReader = cached_reader
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(
            os.path.dirname(model_path), gguf_file=os.path.basename(model_path), dtype=torch.float32
        ).eval()
    finally:
        gguf.get_tensor_name_map, gguf.GGUFReader = orig_map, orig_reader


def tiny_model(seed: int = 0, vocab: int = 49152) -> LlamaModel:
    """A random 2-layer Llama with the real vocabulary size, so the real tokenizer fits it."""
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        rope_theta=10000.0,
        rms_eps=1e-5,
        max_position=512,
        tie_embeddings=True,
    )
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.5

    t: dict[str, torch.Tensor] = {"token_embd.weight": r(vocab, 32), "output_norm.weight": torch.ones(32)}
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = torch.ones(32)
        t[p + "ffn_norm.weight"] = torch.ones(32)
        t[p + "attn_q.weight"] = r(32, 32)
        t[p + "attn_k.weight"] = r(16, 32)
        t[p + "attn_v.weight"] = r(16, 32)
        t[p + "attn_output.weight"] = r(32, 32)
        t[p + "ffn_gate.weight"] = r(64, 32)
        t[p + "ffn_up.weight"] = r(64, 32)
        t[p + "ffn_down.weight"] = r(32, 64)
    return LlamaModel(cfg, t, "fp32")


@pytest.fixture(scope="session")
def tiny() -> LlamaModel:
    return tiny_model()


def make_engine(model: LlamaModel, **overrides) -> NativeEngine:
    """An engine around an already-built model (no weight loading, no step thread yet)."""
    cfg = EngineConfig(dtype="fp32", **overrides)
    eng = NativeEngine(cfg)
    eng.build_with_model(model)
    return eng


__all__ = ["make_engine", "read_gguf", "tiny_model"]
