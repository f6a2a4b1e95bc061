"""Model definitions, registered by architecture name (as vLLM's model registry): a GGUF's
`general.architecture` or a config.json's `architectures` picks the `Definition` that reads it.
A new family is a module here with its definition added to DEFINITIONS."""

from __future__ import annotations

from switchyard.libs.engine.models.base import MAX_SERVED_POSITIONS, Definition, GgufMeta, ModelConfig
from switchyard.libs.engine.models.gemma3 import Gemma3
from switchyard.libs.engine.models.llama import Llama, Mistral
from switchyard.libs.engine.models.phi3 import Phi3
from switchyard.libs.engine.models.qwen2 import Qwen2
from switchyard.libs.engine.models.qwen3 import Qwen3

DEFINITIONS: tuple[Definition, ...] = (Llama(), Mistral(), Qwen2(), Qwen3(), Phi3(), Gemma3())
GGUF_REGISTRY: dict[str, Definition] = {a: d for d in DEFINITIONS for a in d.gguf_archs}
HF_REGISTRY: dict[str, Definition] = {a: d for d in DEFINITIONS for a in d.hf_archs}


def _unserved(kind: str, name: str, served: list[str]) -> ValueError:
    return ValueError(
        f"{kind} {name!r} is not served by the native engine (served: {', '.join(served)}); "
        "vLLM serves the rest (engine kind 'vllm')"
    )


def for_gguf(arch: str) -> Definition:
    """The definition of a GGUF's `general.architecture`; ValueError naming the served ones."""
    try:
        return GGUF_REGISTRY[arch]
    except KeyError:
        raise _unserved("architecture", arch, sorted(GGUF_REGISTRY)) from None


def for_hf(architectures: list[str]) -> Definition:
    """The definition of a config.json's `architectures`; ValueError naming the served ones."""
    for a in architectures:
        if a in HF_REGISTRY:
            return HF_REGISTRY[a]
    raise _unserved("architecture", ",".join(architectures) or "(none)", sorted(HF_REGISTRY))


__all__ = [
    "DEFINITIONS",
    "GGUF_REGISTRY",
    "HF_REGISTRY",
    "MAX_SERVED_POSITIONS",
    "Definition",
    "GgufMeta",
    "ModelConfig",
    "for_gguf",
    "for_hf",
]
