"""A tenant's safety policy: stored by context next to the tenant's instructions, set by an admin
(`PUT /v1/admin/safety-policy`), and carried on every request as `Work.safety` so each stage that
judges (safety_in, safety_out) or counts (the logger's abuse monitor) reads the same choices.

Only overrides are stored: a category the tenant leaves out keeps the shipped default threshold.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

# The classifier's categories (switchyard.libs.safety.taxonomy.ALL_CATEGORIES; a test keeps the two equal).
SafetyCategory = Literal[
    "S1",
    "S2",
    "S3",
    "S4",
    "S5",
    "S6",
    "S7",
    "S8",
    "S9",
    "S10",
    "S11",
    "S12",
    "S13",
    "S14",
    "prompt_injection",
    "jailbreak",
    "secrets",
    "invisible_text",
]
# "stream": answer text is released as soon as redaction allows; sentences are judged off the token
# path and a block stops the stream. "judged": each sentence is held until the classifier judged it.
AnswerRelease = Literal["stream", "judged"]


class ThresholdOverride(BaseModel):
    """One category's override; a field left out keeps the default, `block_at: null` never blocks.

    Serialization keeps only the fields that were given, so "left out" and "null" survive the wire.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    flag_at: float | None = Field(None, ge=0.0, le=1.0)
    block_at: float | None = Field(None, ge=0.0, le=1.0)

    @field_validator("flag_at")
    @classmethod
    def _flag_at_is_a_score(cls, v: float | None) -> float | None:
        if v is None:
            raise ValueError("flag_at must be a score between 0 and 1 (leave it out to keep the default)")
        return v

    @model_validator(mode="after")
    def _flag_below_block(self) -> ThresholdOverride:
        if self.flag_at is not None and self.block_at is not None and self.flag_at > self.block_at:
            raise ValueError(f"flag_at ({self.flag_at}) is above block_at ({self.block_at})")
        return self

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        return {k: v for k, v in out.items() if k in self.model_fields_set}


class StrikePolicy(BaseModel):
    """When blocked requests suspend a key of the tenant; a field left out keeps the logger's default
    (`SWITCHYARD_LOGGER_ABUSE_THRESHOLD` blocks within `..._ABUSE_WINDOW_S`). Flags never count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # False: this tenant's keys are never suspended for what input safety blocked (blocks still refuse).
    enabled: bool = True
    threshold: int | None = Field(None, ge=1, le=10_000)
    window_s: float | None = Field(None, ge=1.0, le=30 * 86400.0)

    @model_serializer(mode="wrap")
    def _given_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        return {k: v for k, v in out.items() if k == "enabled" or v is not None}


class TenantSafety(BaseModel):
    """What a tenant chose; every field has the default a tenant that chose nothing gets."""

    model_config = ConfigDict(extra="forbid")

    answer_release: AnswerRelease = "stream"
    # How blocked requests count against the tenant's keys (a flag is "worth a look" and never counts).
    strikes: StrikePolicy = Field(default_factory=StrikePolicy)
    thresholds: dict[SafetyCategory, ThresholdOverride] = Field(default_factory=dict)
    # The same for the model's answers (judged by their own, per-category bars; docs/safety.md).
    answer_thresholds: dict[SafetyCategory, ThresholdOverride] = Field(default_factory=dict)

    @classmethod
    def from_stored(cls, raw: str) -> TenantSafety:
        """A stored policy, written by this or an older version: fields since retired are dropped
        (`flag_is_strike`: a flag no longer counts towards suspending a key, whatever the policy said)."""
        data = json.loads(raw)
        for retired in _RETIRED:
            data.pop(retired, None)
        return cls.model_validate(data)


_RETIRED = ("flag_is_strike",)


class SafetyPolicyQuery(BaseModel):
    tenant: str


class SafetyPolicyEntry(BaseModel):
    """A tenant's stored policy (`updated_ms` 0: never set, the defaults apply)."""

    tenant: str
    policy: TenantSafety = Field(default_factory=TenantSafety)
    updated_ms: int = 0
