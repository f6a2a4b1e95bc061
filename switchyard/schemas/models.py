"""A served model as every stage reads it: the registry's entries (settings, the admin API, the bus's
key-value store) are this shape."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

Capability = Literal["chat", "completion", "tools", "structured_outputs"]
Mode = Literal["fast", "reasoning"]
_CHAT_MODEL: tuple[Capability, ...] = ("chat", "completion")
_FAST: tuple[Mode, ...] = ("fast",)


class ModelCard(BaseModel):
    """One served model."""

    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(min_length=1, max_length=128)
    aliases: list[str] = Field(default_factory=list)
    # The inference pool that serves it (the `pool` of its replicas: subjects `infer.<pool>.<replica>`).
    pool: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    # The engine kind its pool runs: 'native' | 'vllm' | 'tensorrt_llm' | 'sim' (switchyard/libs/engine/factory.py).
    engine: str = "native"
    # What the model is: a GGUF file or a Hugging Face checkpoint directory; None: the bundled SmolLM2
    # (switchyard/libs/tokenizer/paths.py). `model_file` is its older name, still read.
    path: str | None = Field(None, max_length=4096, validation_alias=AliasChoices("path", "model_file"))
    # A package whose `assemble(path)` writes `path` when it is absent (the file ships in chunks).
    assemble_package: str | None = None
    owner: str = "switchyard"
    context_length: int = Field(8192, ge=1)
    capabilities: list[Capability] = Field(default_factory=lambda: list(_CHAT_MODEL))
    # A base model has none: a chat request to it is refused (or goes to `fallback`), never templated.
    chat_template: bool = True
    # Router modes it offers (a thinking phase needs a chat model that follows the format).
    modes: list[Mode] = Field(default_factory=lambda: list(_FAST))
    # Another model that takes its requests when it cannot (no live replica, or no chat template for a
    # chat request); only where the operator set one. The request's record says so (route.fallback_from).
    fallback: str | None = None

    def can(self, capability: Capability) -> bool:
        if capability == "chat" and not self.chat_template:
            return False
        return capability in self.capabilities
