"""Llama (1-3, incl. Llama 3's RoPE scaling) and Mistral: the plain decoder every other family adds
to. Mistral's GGUF is a `llama` one (the converter writes no window); from its config.json the
sliding window applies to every layer."""

from __future__ import annotations

from typing import Any, ClassVar

from switchyard.libs.engine.models.base import Definition


class Llama(Definition):
    family = "llama"
    gguf_archs: ClassVar[tuple[str, ...]] = ("llama",)
    hf_archs = ("LlamaForCausalLM",)
    gguf_qk_interleaved = True


class Mistral(Llama):
    family = "mistral"
    gguf_archs = ()
    hf_archs = ("MistralForCausalLM",)

    def hf_sliding_window(self, hf: dict[str, Any]) -> int:
        return int(hf.get("sliding_window") or 0)
