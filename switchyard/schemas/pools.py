"""The admin API's pools (`/v1/admin/models`): what the gateway asks the stack supervisor, and what it lists."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from switchyard.schemas.messages import Heartbeat
from switchyard.schemas.models import MODEL_NAME_PATTERN, ModelCard


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
