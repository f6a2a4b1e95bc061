"""A served model as every stage reads it: the registry's entries (settings, the admin API, the bus's
key-value store) are this shape."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from switchyard.schemas.messages import Heartbeat

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
    # A package whose `assemble(path)` writes `path` when it is absent (the file ships in chunks).
    assemble_package: str | None = Field(None, max_length=128)
    owner: str = Field("switchyard", max_length=128)
    context_length: int = Field(8192, ge=1, le=1 << 24)
    capabilities: list[Capability] = Field(default_factory=lambda: list(_CHAT_MODEL), max_length=8)
    # A base model has none: a chat request to it is refused (or goes to `fallback`), never templated.
    chat_template: bool = True
    # Router modes it offers (a thinking phase needs a chat model that follows the format).
    modes: list[Mode] = Field(default_factory=lambda: list(_FAST), max_length=4)
    # Another model that takes its requests when it cannot (no live replica, or no chat template for a
    # chat request); only where the operator set one. The request's record says so (route.fallback_from).
    fallback: str | None = Field(None, max_length=128)

    def can(self, capability: Capability) -> bool:
        if capability == "chat" and not self.chat_template:
            return False
        return capability in self.capabilities


# ---- the admin API's pools (`/v1/admin/models`): the gateway asks, the stack supervisor starts and stops ----


class PoolStart(BaseModel):
    """Start a pool for `card` (the gateway has checked its names; the supervisor checks its files) and answer
    once one of its replicas heartbeats, or with the reason it could not within `timeout_s`."""

    card: ModelCard
    timeout_s: float = Field(120.0, gt=0, le=3600)


class PoolStop(BaseModel):
    """Remove model `name` from the registry (new requests for it: 404) and stop its pool once the requests it
    holds are done."""

    name: str = Field(min_length=1, max_length=128, pattern=MODEL_NAME_PATTERN)


class PoolReply(BaseModel):
    """The supervisor's answer: the entry as the registry holds it, or why not (`code` an ErrorCode value)."""

    ok: bool
    card: ModelCard | None = None
    code: str = ""
    message: str = ""
    # The last lines the pool's process wrote, when it failed to start.
    log_tail: str = ""
    # The replicas heartbeating for its pool when the supervisor answered.
    replicas: list[Heartbeat] = Field(default_factory=list)


class ModelEntry(BaseModel):
    """`GET /v1/admin/models`: a registry entry, and the replicas of its pool that heartbeat now."""

    card: ModelCard
    default: bool = False
    state: Literal["serving", "no_replica"]
    replicas: list[Heartbeat] = Field(default_factory=list)


class ModelEntryList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelEntry]
