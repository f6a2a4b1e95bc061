"""A served model as every stage reads it: the registry's entries (settings, the admin API, the bus's
key-value store) are this shape."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

Capability = Literal["chat", "completion", "tools", "structured_outputs"]
Mode = Literal["fast", "reasoning"]
_CHAT_MODEL: tuple[Capability, ...] = ("chat", "completion")
_FAST: tuple[Mode, ...] = ("fast",)
# What a model added over the admin API may be called (its name and each alias): no `:` (the mode suffix,
# `model:reasoning`), no `/`, no whitespace; dots are allowed (`qwen2.5-0.5b`): names never reach a subject,
# the registry's key-value entries are keyed by the pool (`POOL_PATTERN`, one subject token).
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
POOL_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
Alias = Annotated[str, Field(min_length=1, max_length=128)]


class ThinkingSpec(BaseModel):
    """How a model that was trained to think does it: its thinking is the text between `open` and `close`
    (Qwen3, DeepSeek-R1: `<think>` and `</think>`), written before the answer."""

    model_config = ConfigDict(frozen=True)

    open: str = Field("<think>", min_length=1, max_length=32)
    close: str = Field("</think>", min_length=1, max_length=32)
    # The chat template's keyword that turns thinking on or off (Qwen3's `enable_thinking`); None: the
    # template has none, and thinking is turned off by rendering an empty thinking block after the prompt.
    template_switch: str | None = Field("enable_thinking", max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # Whether a request that asks nothing about thinking gets it.
    default_on: bool = True


class ModelCard(BaseModel):
    """One served model."""

    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(min_length=1, max_length=128)
    aliases: list[Alias] = Field(default_factory=list, max_length=16)
    # The inference pool that serves it (the `pool` of its replicas: subjects `infer.<pool>.<replica>`), and
    # its key in the registry's key-value bucket: one pool per model.
    pool: str = Field(min_length=1, max_length=64, pattern=POOL_PATTERN)
    # The engine kind its pool runs: 'native' | 'vllm' | 'tensorrt_llm' | 'sim' (switchyard/libs/engine/factory.py).
    engine: str = Field("native", min_length=1, max_length=32)
    # What the model is: a GGUF file or a Hugging Face checkpoint directory; None: the bundled SmolLM2
    # (switchyard/libs/tokenizer/paths.py). `model_file` is its older name, still read.
    path: str | None = Field(None, max_length=4096, validation_alias=AliasChoices("path", "model_file"))
    # The native engine's weight format for this model ('auto' measures the kernels at load; 'fp32' is
    # the reference a checkpoint's own library computes); None: the inference service's setting. vLLM and
    # TensorRT-LLM serve a checkpoint in its own dtype.
    dtype: Literal["auto", "hybrid", "native", "int8", "bf16", "fp32"] | None = None
    # A package whose `assemble(path)` writes `path` when it is absent (the file ships in chunks).
    assemble_package: str | None = Field(None, max_length=128)
    owner: str = Field("switchyard", max_length=128)
    context_length: int = Field(8192, ge=1, le=1 << 24)
    capabilities: list[Capability] = Field(default_factory=lambda: list(_CHAT_MODEL), max_length=8)
    # A base model has none: a chat request to it is refused (or goes to `fallback`), never templated.
    chat_template: bool = True
    # Router modes it offers. 'reasoning' on a model without `thinking` is a prompted thinking phase
    # (switchyard/services/inference/phases.py), which needs a chat model that follows the format.
    modes: list[Mode] = Field(default_factory=lambda: list(_FAST), max_length=4)
    # Set for a model trained to think: reasoning mode is then its own thinking, parsed out of its text.
    thinking: ThinkingSpec | None = None
    # Another model that takes its requests when it cannot (no live replica, or no chat template for a
    # chat request); only where the operator set one. The request's record says so (route.fallback_from).
    fallback: str | None = Field(None, max_length=128)

    def offers(self, mode: Mode) -> bool:
        """Whether the model serves `mode`: a thinking model always offers reasoning (its own thinking)."""
        return mode in self.modes or (mode == "reasoning" and self.thinking is not None)

    def can(self, capability: Capability) -> bool:
        if capability == "chat" and not self.chat_template:
            return False
        return capability in self.capabilities
