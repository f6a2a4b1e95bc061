"""Qwen 2 / 2.5: Llama with biases on q, k and v (`attn_{q,k,v}.bias`, added after the stacked
product); NEOX RoPE, so the GGUF's rows are in the checkpoint's order."""

from __future__ import annotations

from typing import Any

from switchyard.libs.engine.models.base import Definition


class Qwen2(Definition):
    family = "qwen2"
    gguf_archs = ("qwen2",)
    hf_archs = ("Qwen2ForCausalLM",)

    def hf_sliding_window(self, hf: dict[str, Any]) -> int:
        # Qwen 2 configs carry a window that applies only with use_sliding_window (off in released ones).
        return int(hf.get("sliding_window") or 0) if hf.get("use_sliding_window") else 0
