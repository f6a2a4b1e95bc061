"""Per-tenant safety policy: score thresholds per category and direction, and how trust depends
on the source."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchyard.libs.safety.taxonomy import (
    ALLOW,
    BLOCK,
    FLAG,
    HARM_CATEGORIES,
    INVISIBLE_TEXT,
    JAILBREAK,
    PROMPT_INJECTION,
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    S8,
    S9,
    S10,
    S11,
    S12,
    S13,
    S14,
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
    """Requests (user, file and tool text)."""
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


# The classifier learned from requests; on the model's own sentences (explanations, safety
# advice, code, the fragments a small model writes) its scores run high, so stopping a stream
# needs a near-certain score. Per category, chosen on the answer-side dev sets (greedy answers of
# the shipped model to 208 everyday prompts, 196 harmful answer passages; docs/safety.md,
# "Answers and work traffic"): the lowest block score at which at most one dev answer of an
# everyday prompt is stopped (one is a degenerate repetition that scores 0.9999 as S4 and S12). Where a benign answer scored high (shell steps as S14, first-aid and exercise steps as
# S11, dosing as S6) the bar sits just above it; the categories no benign answer came near
# (S10, S12) sit lower, because their harmful passages scored from 0.83 up.
ANSWER_BLOCK_AT: dict[str, float | None] = {
    S1: 0.9,
    S2: 0.9,
    S3: 0.99,
    S4: 0.9,
    S5: 0.9,
    # An answer's dosing or legal steps score like a request for them ("give the dose on the packet
    # for her weight" at 0.996), and harmful advice as often low (71 % stopped at 0.96 on the dev
    # passages): on answers S6 flags for review and never stops a stream. Tenants can set a bar.
    S6: None,
    S7: 0.95,
    S8: 0.9,
    S9: 0.975,
    S10: 0.85,
    S11: 0.995,
    S12: 0.8,
    S13: 0.9,
    S14: 0.99,
}


def default_answer_thresholds() -> dict[str, Threshold]:
    """The model's answers (source ``model``): only harm categories are judged there."""
    return {c: Threshold(flag_at=0.5, block_at=b) for c, b in ANSWER_BLOCK_AT.items()}


def _merge(defaults: dict[str, Threshold], v: Any) -> dict[str, Any]:
    merged: dict[str, Any] = dict(defaults)
    for k, t in dict(v).items():
        if isinstance(t, dict) and k in merged:
            t = {**merged[k].model_dump(), **t}
        merged[k] = t
    return merged


class SafetyPolicy(BaseModel):
    """What to do with each category's score, per direction.

    ``thresholds`` judge requests (user messages, files, tool results); ``answer_thresholds``
    judge the model's answer, where the same score means something else (an answer that explains
    a danger, or refuses, names it). Tenants store only their overrides (e.g.
    ``{"thresholds": {"S6": {"block_at": null}}, "answer_thresholds": {"S11": {"block_at": 0.99}}}``);
    categories they leave out keep the defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thresholds: dict[str, Threshold] = Field(default_factory=default_thresholds)
    answer_thresholds: dict[str, Threshold] = Field(default_factory=default_answer_thresholds)
    # Files and tool results are data, not the user's intent: a hit there is worth surfacing
    # (the model is told to treat it as data) but refusing the whole request would let any
    # web page or uploaded PDF deny service.
    untrusted_sources: frozenset[str] = frozenset({"file", "tool"})
    # Code, shell, logs and configuration read like attacks to a classifier that learned them from
    # requests (`ls -la` in the sandbox scored S14 1.00). In a message that carries such material
    # (switchyard/libs/safety/technical.py), or asks the code tool to run code, the classifier's verdicts in
    # these categories flag, never block; rules and the other categories stand. A tenant that sets
    # its own request bar for one of them takes it out of this set (switchyard/libs/safety/tenant.py).
    technical_flag_only: frozenset[str] = frozenset({S14, PROMPT_INJECTION})
    # Model output is only judged on harm categories; secrets in output are redacted instead,
    # and "ignore previous instructions" in an answer is not an attack on anyone.
    output_categories: frozenset[str] = frozenset(HARM_CATEGORIES)
    disabled: frozenset[str] = frozenset()

    @field_validator("thresholds", mode="before")
    @classmethod
    def _merge_defaults(cls, v: Any) -> Any:
        return default_thresholds() if v is None else _merge(default_thresholds(), v)

    @field_validator("answer_thresholds", mode="before")
    @classmethod
    def _merge_answer_defaults(cls, v: Any) -> Any:
        return default_answer_thresholds() if v is None else _merge(default_answer_thresholds(), v)

    def threshold(self, category: str, source: str = "user") -> Threshold:
        table = self.answer_thresholds if source == "model" else self.thresholds
        return table.get(category) or Threshold()

    def applies(self, category: str, source: str) -> bool:
        if category in self.disabled:
            return False
        return source != "model" or category in self.output_categories

    def action(self, category: str, score: float, source: str = "user", *, learned: bool = True) -> str:
        """``learned=False`` for rule hits: their scores are fixed confidences of exact patterns, so
        they keep the request bars in both directions (the answer bars are fitted to the classifier)."""
        if not self.applies(category, source):
            return ALLOW
        t = self.threshold(category, source if learned else "user")
        if t.block_at is not None and score >= t.block_at:
            return FLAG if source in self.untrusted_sources else BLOCK
        if score >= t.flag_at:
            return FLAG
        return ALLOW
