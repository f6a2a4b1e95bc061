"""What a model definition is: the served config (`ModelConfig`, one shape for every family) and
`Definition`, which reads a family's config from a GGUF's metadata or a Hugging Face config.json and
brings its tensors into the one internal form the model loads (GGUF tensor names, HF's rotate-half
row order, q/k/v and gate/up as separate matrices, Llama 3's RoPE factors as `rope_freqs.weight`).

The model (model.DecoderModel) runs whatever a config and its tensors say: QKV biases, QK-norm and
post-norms are there or not, the activation and the windows are config fields; so a family is a
definition, not a branch in the forward pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from switchyard.libs.engine.models.layers import llama3_rope_factors

# The longest context the RoPE tables are built for: Gemma 3's file says 32768, and its two
# tables (global and local bases) of that many positions x 256 would take 128 MiB of fp32.
MAX_SERVED_POSITIONS = 8192


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_eps: float
    max_position: int
    tie_embeddings: bool
    arch: str = "llama"  # the definition's family (models.REGISTRY), for logs and caches
    embed_scale: float = 1.0
    # Windowed layers attend to the last `sliding_window` keys (itself included) with RoPE base
    # `rope_local_theta`; with `swa_pattern` p, layer i is windowed iff i % p < p - 1 (Gemma 3),
    # without one every layer is (Mistral). 0: no window.
    sliding_window: int = 0
    swa_pattern: int = 0
    rope_local_theta: float = 10000.0
    activation: str = "silu"  # layers.ACTIVATIONS

    def window(self, layer: int) -> int:
        """The keys layer `layer` attends to back from a query, itself included (0: all)."""
        p = self.swa_pattern
        if not self.sliding_window or (p and layer % p == p - 1):
            return 0
        return self.sliding_window


class GgufMeta:
    """A GGUF's metadata under its architecture's prefix (`<arch>.attention.head_count`...)."""

    def __init__(self, reader: Any, arch: str) -> None:
        self.reader, self.arch = reader, arch

    def get(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(f"{self.arch}.{key}")
        return default if f is None else f.contents()


class Definition:
    """One architecture family. `gguf_archs`: its `general.architecture` names; `hf_archs`: its
    config.json `architectures` names; `gguf_qk_interleaved`: llama.cpp's converter reordered its
    Q/K rows for GPT-J-style RoPE (undone on read); `fused`: matrices stored fused, split on read
    into the parts the model stacks itself (weights.FUSED)."""

    family: ClassVar[str] = ""
    gguf_archs: ClassVar[tuple[str, ...]] = ()
    hf_archs: ClassVar[tuple[str, ...]] = ()
    gguf_qk_interleaved: ClassVar[bool] = False
    fused: ClassVar[dict[str, tuple[str, ...]]] = {}

    # -- GGUF --------------------------------------------------------------------------------
    def config_from_gguf(self, meta: GgufMeta, tensors: dict[str, torch.Tensor]) -> ModelConfig:
        n_head = int(meta.get("attention.head_count"))
        hidden = int(meta.get("embedding_length"))
        head_dim = int(meta.get("attention.key_length", meta.get("rope.dimension_count", hidden // n_head)))
        rope_dim = int(meta.get("rope.dimension_count", head_dim))
        if rope_dim != head_dim:
            raise ValueError(
                f"partial rotary embeddings ({rope_dim} of {head_dim}) are not served by the native engine"
            )
        scaling = meta.get("rope.scaling.type", "none")
        if scaling not in ("none", ""):
            raise ValueError(f"RoPE scaling {scaling!r} is not served by the native engine")
        theta = float(meta.get("rope.freq_base", 10000.0))
        return ModelConfig(
            vocab_size=int(tensors["token_embd.weight"].shape[0]),
            hidden_size=hidden,
            intermediate_size=int(meta.get("feed_forward_length")),
            num_layers=int(meta.get("block_count")),
            num_heads=n_head,
            num_kv_heads=int(meta.get("attention.head_count_kv", n_head)),
            head_dim=head_dim,
            rope_theta=theta,
            rms_eps=float(meta.get("attention.layer_norm_rms_epsilon", 1e-5)),
            max_position=min(int(meta.get("context_length", 2048)), MAX_SERVED_POSITIONS),
            tie_embeddings="output.weight" not in tensors,
            arch=self.family,
            sliding_window=int(meta.get("attention.sliding_window", 0) or 0),
            rope_local_theta=theta,
        )

    # -- Hugging Face ----------------------------------------------------------------------------
    def config_from_hf(self, hf: dict[str, Any], tensors: dict[str, torch.Tensor]) -> ModelConfig:
        """The config of a checkpoint's config.json; adds `rope_freqs.weight` to `tensors` where
        the RoPE is Llama 3's (as llama.cpp's converter does)."""
        rope: dict[str, Any] = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
        theta = float(hf.get("rope_theta") or rope.get("rope_theta") or 10000.0)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        n_head, hidden = int(hf["num_attention_heads"]), int(hf["hidden_size"])
        head_dim = int(hf.get("head_dim") or hidden // n_head)
        if rope_type == "llama3":
            tensors["rope_freqs.weight"] = llama3_rope_factors(theta, head_dim, rope)
        elif rope_type != "default":
            raise ValueError(f"RoPE scaling {rope_type!r} is not served by the native engine")
        if float(hf.get("partial_rotary_factor", 1.0)) != 1.0:
            raise ValueError("partial rotary embeddings are not served by the native engine")
        return ModelConfig(
            vocab_size=int(tensors["token_embd.weight"].shape[0]),
            hidden_size=hidden,
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=n_head,
            num_kv_heads=int(hf.get("num_key_value_heads") or n_head),
            head_dim=head_dim,
            rope_theta=theta,
            rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
            max_position=min(int(hf.get("max_position_embeddings", 2048)), MAX_SERVED_POSITIONS),
            tie_embeddings="output.weight" not in tensors,
            arch=self.family,
            sliding_window=self.hf_sliding_window(hf),
            rope_local_theta=theta,
        )

    def hf_sliding_window(self, hf: dict[str, Any]) -> int:
        return 0

    # -- both ------------------------------------------------------------------------------------
    def split_fused(self, tensors: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
        """Every fused matrix (`fused`) split by rows into its parts, in every stored form (dense,
        4-bit or 8-bit blocks: all are row-major by output row), biases too."""
        if not self.fused:
            return tensors
        out = dict(tensors)
        for i in range(cfg.num_layers):
            for name, parts in self.fused.items():
                sizes = self.part_rows(name, cfg)
                prefix = f"blk.{i}.{name}."
                for key in [k for k in out if k.startswith(prefix)]:
                    rest = key[len(prefix) :]  # "weight", "weight.q8d", "bias"...
                    pieces = out.pop(key).split(sizes, dim=0)
                    for part, piece in zip(parts, pieces, strict=True):
                        out[f"blk.{i}.{part}.{rest}"] = piece.contiguous()
        return out

    def part_rows(self, fused: str, cfg: ModelConfig) -> list[int]:
        raise NotImplementedError(fused)
