"""Small random-weight Hugging Face checkpoints, written by `transformers` itself, for the tests that
serve a model the way its users hold it: `config.json`, safetensors, a real `tokenizer.json` and its
chat template, `generation_config.json`.

The tokenizer is the bundled SmolLM2's (byte-level BPE, ChatML template), read from its GGUF by
transformers and saved as a Hugging Face tokenizer: no hub, no internet. The weights are seeded, so a
directory is the same on every run. Each family's config sets what makes it that family (QKV bias,
QK-norm, llama3 RoPE scaling, a sliding window, fused QKV and gate-up).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

# The shape every family shares: small enough to build in a second, big enough to have real heads.
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
MAX_POSITIONS = 2048

ARCHITECTURES = ("llama", "llama3", "qwen2", "qwen3", "mistral", "phi3")


def _family(arch: str, vocab: int, bos: int, eos: int) -> tuple[str, dict[str, Any]]:
    """(transformers config class, its kwargs) for one family."""
    common: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "tie_word_embeddings": False,
        # Wider than the default 0.02: logits far apart, so greedy tokens vary and few are near-ties.
        "initializer_range": 0.2,
    }
    if arch == "llama":
        return "LlamaConfig", {**common, "rope_theta": 10000.0}
    if arch == "llama3":
        scaling = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256,
        }
        return "LlamaConfig", {**common, "rope_theta": 500000.0, "rope_scaling": scaling}
    if arch == "qwen2":
        return "Qwen2Config", {**common, "rope_theta": 1000000.0, "tie_word_embeddings": True}
    if arch == "qwen3":
        return "Qwen3Config", {**common, "head_dim": 32, "rope_theta": 1000000.0, "tie_word_embeddings": True}
    if arch == "mistral":
        return "MistralConfig", {**common, "rope_theta": 10000.0, "sliding_window": 16, "head_dim": HIDDEN // HEADS}
    if arch == "phi3":
        return "Phi3Config", {**common, "rope_theta": 10000.0, "pad_token_id": None}
    raise ValueError(f"unknown family {arch!r} (known: {', '.join(ARCHITECTURES)})")


@functools.lru_cache(maxsize=1)
def _tokenizer_files() -> str:
    """A directory holding SmolLM2's tokenizer as Hugging Face files, built once per test process."""
    import transformers

    from switchyard.libs.tokenizer.paths import default_model_path

    gguf = default_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(
        os.path.dirname(gguf), gguf_file=os.path.basename(gguf), local_files_only=True
    )
    out = tempfile.mkdtemp(prefix="switchyard-hf-tokenizer-")
    tok.save_pretrained(out)
    return out


def write_tokenizer(out_dir: str | Path) -> None:
    """SmolLM2's tokenizer files (tokenizer.json, tokenizer_config.json with the chat template) into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(_tokenizer_files()):
        shutil.copy(os.path.join(_tokenizer_files(), name), os.path.join(out_dir, name))


def write_checkpoint(
    out_dir: str | Path, arch: str = "llama", seed: int = 0, dtype: str = "float32", **config: Any
) -> Path:
    """A random-weight checkpoint of family `arch` in out_dir, as `save_pretrained` writes it; `config`
    overrides the family's config fields (vLLM's CPU attention, for one, takes no head_dim under 32)."""
    import torch
    import transformers

    out = Path(out_dir)
    write_tokenizer(out)
    tok = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    bos = tok.bos_token_id if tok.bos_token_id is not None else eos
    config_class, kwargs = _family(arch, len(tok), bos, eos)
    config = getattr(transformers, config_class)(**{**kwargs, **config})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    # Random init leaves norms at 1 and biases at 0: give them values, so a reader that drops one is caught.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "layernorm.weight", ".bias")):
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    model.generation_config.eos_token_id = [eos, tok.eos_token_id] if tok.eos_token_id != eos else eos
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def read_config(path: str | Path) -> dict[str, Any]:
    with open(Path(path) / "config.json") as f:
        data: dict[str, Any] = json.load(f)
    return data
