"""Per-tenant safety policy: score thresholds per category and how trust depends on the source."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from libs.safety.taxonomy import (
    ALLOW,
    BLOCK,
    FLAG,
    HARM_CATEGORIES,
    INVISIBLE_TEXT,
    JAILBREAK,
    PROMPT_INJECTION,
    SECRETS,
)

Source = Literal["user", "file", "tool", "model"]
SOURCES: tuple[str, ...] = ("user", "file", "tool", "model")


class Threshold(BaseModel):
    """``score >= block_at`` blocks, else ``score >= flag_at`` flags; ``block_at=None`` never blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag_at: float = Field(default=0.45, ge=0.0, le=1.0)
    block_at: float | None = Field(default=0.5, ge=0.0, le=1.0)


def default_thresholds() -> dict[str, Threshold]:
    # Learned scores are P(harmful) from the classifier (see classifier.category_scores): block
    # once harm is the likelier reading, flag just below for review. Chosen on the training
    # set's cross-validation and the dev set (docs/safety.md); tenants can raise them.
    t = {c: Threshold() for c in HARM_CATEGORIES}
    t[PROMPT_INJECTION] = Threshold()
    t[JAILBREAK] = Threshold()
    t[SECRETS] = Threshold(flag_at=0.5, block_at=0.5)
    # Hidden characters have innocent uses (RTL marks, emoji joiners): surface them, never refuse.
    t[INVISIBLE_TEXT] = Threshold(flag_at=0.5, block_at=None)
    return t


class SafetyPolicy(BaseModel):
    """What to do with each category's score.

    Tenants store only their overrides (e.g. ``{"thresholds": {"S6": {"block_at": null}}}``);
    categories they leave out keep the defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thresholds: dict[str, Threshold] = Field(default_factory=default_thresholds)
    # Files and tool results are data, not the user's intent: a hit there is worth surfacing
    # (the model is told to treat it as data) but refusing the whole request would let any
    # web page or uploaded PDF deny service.
    untrusted_sources: frozenset[str] = frozenset({"file", "tool"})
    # Model output is only judged on harm categories; secrets in output are redacted instead,
    # and "ignore previous instructions" in an answer is not an attack on anyone.
    output_categories: frozenset[str] = frozenset(HARM_CATEGORIES)
    disabled: frozenset[str] = frozenset()
    # The classifier learned from requests; on answers (explanations, refusals that name the
    # topic) its middling scores are noise. Stopping a stream needs a near-certain score.
    model_block_at: float = Field(default=0.9, ge=0.0, le=1.0)

    @field_validator("thresholds", mode="before")
    @classmethod
    def _merge_defaults(cls, v: Any) -> Any:
        if v is None:
            return default_thresholds()
        merged: dict[str, Any] = dict(default_thresholds())
        for k, t in dict(v).items():
            if isinstance(t, dict) and k in merged:
                t = {**merged[k].model_dump(), **t}
            merged[k] = t
        return merged

    def threshold(self, category: str) -> Threshold:
        return self.thresholds.get(category) or Threshold()

    def applies(self, category: str, source: str) -> bool:
        if category in self.disabled:
            return False
        return source != "model" or category in self.output_categories

    def action(self, category: str, score: float, source: str = "user") -> str:
        if not self.applies(category, source):
            return ALLOW
        t = self.threshold(category)
        block_at = t.block_at
        if block_at is not None and source == "model":
            block_at = max(block_at, self.model_block_at)
        if block_at is not None and score >= block_at:
            return FLAG if source in self.untrusted_sources else BLOCK
        if score >= t.flag_at:
            return FLAG
        return ALLOW

    def flag_floor(self) -> float:
        """Lowest score at which any category could act: below it a score is noise."""
        return min((t.flag_at for t in self.thresholds.values()), default=0.5)
