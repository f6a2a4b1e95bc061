"""API keys on the bus: the change every gateway hears, and the usage query the logger answers.

`keys.changed` (plain publish, no reply): a key was revoked, rotated or updated; every gateway drops it
from its cache of verified keys, so the next request on any gateway reads the store (a revoked key is
refused at once everywhere, not after `SWITCHYARD_GATEWAY_KEY_CACHE_S`). Only the key's id travels:
never its secret nor its hash.

`admin.keys.usage` (request/reply, logger queue group): a key's tokens and requests from the request
records, by model and by UTC day.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from switchyard.schemas.subjects import ID_PATTERN


class KeyChanged(BaseModel):
    key_id: str = Field(pattern=ID_PATTERN)
    change: Literal["created", "updated", "rotated", "revoked"]
    ts_ms: int = 0


class KeyUsageQuery(BaseModel):
    key_id: str = Field(pattern=ID_PATTERN)
    since_ms: int = Field(ge=0)
    until_ms: int = Field(ge=0)


class UsageCount(BaseModel):
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ModelUsage(UsageCount):
    model: str


class DayUsage(UsageCount):
    day: str  # YYYY-MM-DD, UTC


class KeyUsage(BaseModel):
    key_id: str
    since_ms: int
    until_ms: int
    total: UsageCount = Field(default_factory=UsageCount)
    by_model: list[ModelUsage] = Field(default_factory=list)
    by_day: list[DayUsage] = Field(default_factory=list)
