"""Per-tenant safety policy: score thresholds per category and direction, and how trust depends
on the source."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from switchyard.libs.safety.calibration import Bar, Calibration, shipped_calibration
from switchyard.libs.safety.taxonomy import (
    ALLOW,
    BLOCK,
    FLAG,
    HARM_CATEGORIES,
    INVISIBLE_TEXT,
    JAILBREAK,
    PROMPT_INJECTION,
    S14,
    SECRETS,
)

Source = Literal["user", "file", "tool", "memory", "model"]
SOURCES: tuple[str, ...] = ("user", "file", "tool", "memory", "model")
# Text that arrives as data: what a file, a tool, a fetched page or a saved memory says, not what the user asks.
DATA_SOURCES: frozenset[str] = frozenset({"file", "tool", "memory"})


class Threshold(BaseModel):
    """``score >= block_at`` blocks, else ``score >= flag_at`` flags; ``block_at=None`` never blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag_at: float = Field(default=0.45, ge=0.0, le=1.0)
    block_at: float | None = Field(default=0.5, ge=0.0, le=1.0)


LEARNED: tuple[str, ...] = (*HARM_CATEGORIES, PROMPT_INJECTION, JAILBREAK)


def _bars(table: dict[str, Bar]) -> dict[str, Threshold]:
    return {c: Threshold(flag_at=b.flag_at, block_at=b.block_at) for c, b in table.items()}


def default_thresholds(cal: Calibration | None = None) -> dict[str, Threshold]:
    """Requests (user, file, tool and memory text): the learned categories' bars from the calibration file;
    secrets and hidden text, which only rules find, keep their rule bars."""
    t = {c: Threshold() for c in LEARNED}
    t.update(_bars((cal or shipped_calibration()).requests))
    rules = default_rule_thresholds()
    t[SECRETS], t[INVISIBLE_TEXT] = rules[SECRETS], rules[INVISIBLE_TEXT]
    return t


def default_rule_thresholds() -> dict[str, Threshold]:
    """Rule hits: a rule's score is the fixed confidence of an exact pattern (0.9 and up for the phrases,
    1.0 for a credential), so every hit blocks, whatever bar the classifier's scores need."""
    t = {c: Threshold() for c in LEARNED}
    t[SECRETS] = Threshold(flag_at=0.5, block_at=0.5)
    # Hidden characters have innocent uses (RTL marks, emoji joiners): surface them, never refuse.
    t[INVISIBLE_TEXT] = Threshold(flag_at=0.5, block_at=None)
    return t


def default_answer_thresholds(cal: Calibration | None = None) -> dict[str, Threshold]:
    """The model's answers (source ``model``): only harm categories are judged there."""
    return _bars((cal or shipped_calibration()).answers)


def _merge(defaults: dict[str, Threshold], v: Any) -> dict[str, Any]:
    merged: dict[str, Any] = dict(defaults)
    for k, t in dict(v).items():
        if isinstance(t, dict) and k in merged:
            t = {**merged[k].model_dump(), **t}
        merged[k] = t
    return merged


class SafetyPolicy(BaseModel):
    """What to do with each category's score, per direction and source.

    ``thresholds`` judge the classifier's scores on requests (user messages, files, tool results,
    memory); ``answer_thresholds`` judge them on the model's answer, where the same score means
    something else (an answer that explains a danger, or refuses, names it); ``rule_thresholds`` judge
    rule hits, which block wherever they are found. Both learned tables default to the calibration file
    (``calibration.py``). Tenants store only their overrides (e.g.
    ``{"thresholds": {"S6": {"block_at": null}}, "answer_thresholds": {"S11": {"block_at": 0.99}}}``);
    categories they leave out keep the defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thresholds: dict[str, Threshold] = Field(default_factory=default_thresholds)
    answer_thresholds: dict[str, Threshold] = Field(default_factory=default_answer_thresholds)
    rule_thresholds: dict[str, Threshold] = Field(default_factory=default_rule_thresholds)
    # Files, tool results and memory are data, not the user's intent: a hit there is worth surfacing
    # (the model is told to treat it as data) but refusing the whole request would let any
    # web page or uploaded PDF deny service.
    untrusted_sources: frozenset[str] = DATA_SOURCES
    # Categories the classifier judges only in data. An instruction to the model is suspicious inside a
    # fetched page or a file, and the very point of the user's own request ("summarise this in plain
    # words"); on user text only the rules (textbook override phrases, control tokens) find injection.
    data_only: frozenset[str] = frozenset({PROMPT_INJECTION})
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

    @classmethod
    def calibrated(cls, calibration: Calibration) -> SafetyPolicy:
        """The defaults, with the learned bars of ``calibration`` instead of the shipped file's."""
        return cls(thresholds=default_thresholds(calibration), answer_thresholds=default_answer_thresholds(calibration))

    @field_validator("thresholds", mode="before")
    @classmethod
    def _merge_defaults(cls, v: Any) -> Any:
        return default_thresholds() if v is None else _merge(default_thresholds(), v)

    @field_validator("answer_thresholds", mode="before")
    @classmethod
    def _merge_answer_defaults(cls, v: Any) -> Any:
        return default_answer_thresholds() if v is None else _merge(default_answer_thresholds(), v)

    @field_validator("rule_thresholds", mode="before")
    @classmethod
    def _merge_rule_defaults(cls, v: Any) -> Any:
        return default_rule_thresholds() if v is None else _merge(default_rule_thresholds(), v)

    def threshold(self, category: str, source: str = "user", *, learned: bool = True) -> Threshold:
        if not learned:
            table = self.rule_thresholds
        elif source == "model":
            table = self.answer_thresholds
        else:
            table = self.thresholds
        return table.get(category) or Threshold()

    def applies(self, category: str, source: str) -> bool:
        if category in self.disabled:
            return False
        return source != "model" or category in self.output_categories

    def scores(self, category: str, source: str) -> bool:
        """Whether the classifier's score for ``category`` counts on text from ``source``."""
        return self.applies(category, source) and (category not in self.data_only or source in self.untrusted_sources)

    def action(self, category: str, score: float, source: str = "user", *, learned: bool = True) -> str:
        """``learned=False`` for rule hits: their scores are fixed confidences of exact patterns, judged by
        ``rule_thresholds`` in both directions (the learned bars are fitted to the classifier's scores)."""
        if not (self.scores(category, source) if learned else self.applies(category, source)):
            return ALLOW
        t = self.threshold(category, source, learned=learned)
        if t.block_at is not None and score >= t.block_at:
            return FLAG if source in self.untrusted_sources else BLOCK
        if score >= t.flag_at:
            return FLAG
        return ALLOW
