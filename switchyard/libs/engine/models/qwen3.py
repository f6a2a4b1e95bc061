"""Qwen 3 (dense): Llama with per-head RMSNorm of q and k before RoPE (`attn_{q,k}_norm`), no
biases, head_dim set apart from hidden / heads; NEOX RoPE."""

from __future__ import annotations

from switchyard.libs.engine.models.base import Definition


class Qwen3(Definition):
    family = "qwen3"
    gguf_archs = ("qwen3",)
    hf_archs = ("Qwen3ForCausalLM",)
