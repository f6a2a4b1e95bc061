"""Phi-3: Llama with q, k, v stored as one matrix (`attn_qkv`, HF's `qkv_proj`) and gate and up as
one (`ffn_up` of 2 x intermediate rows, HF's `gate_up_proj`, gate first); split on read into the
parts every family stores. NEOX RoPE; the converter writes window 0 where the config has none."""

from __future__ import annotations

from typing import Any, ClassVar

from switchyard.libs.engine.models.base import Definition, ModelConfig


class Phi3(Definition):
    family = "phi3"
    gguf_archs = ("phi3",)
    hf_archs = ("Phi3ForCausalLM",)
    fused: ClassVar[dict[str, tuple[str, ...]]] = {
        "attn_qkv": ("attn_q", "attn_k", "attn_v"),
        "ffn_up": ("ffn_gate", "ffn_up"),
    }

    def part_rows(self, fused: str, cfg: ModelConfig) -> list[int]:
        if fused == "attn_qkv":
            kv = cfg.num_kv_heads * cfg.head_dim
            return [cfg.num_heads * cfg.head_dim, kv, kv]
        return [cfg.intermediate_size, cfg.intermediate_size]

    def hf_sliding_window(self, hf: dict[str, Any]) -> int:
        return int(hf.get("sliding_window") or 0)
