"""Categories, actions and the verdict every classifier returns."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Llama Guard 3 hazard taxonomy (MLCommons), kept verbatim so verdicts line up with other tooling.
S1 = "S1"
S2 = "S2"
S3 = "S3"
S4 = "S4"
S5 = "S5"
S6 = "S6"
S7 = "S7"
S8 = "S8"
S9 = "S9"
S10 = "S10"
S11 = "S11"
S12 = "S12"
S13 = "S13"
S14 = "S14"
PROMPT_INJECTION = "prompt_injection"
JAILBREAK = "jailbreak"
SECRETS = "secrets"
INVISIBLE_TEXT = "invisible_text"
BENIGN = "benign"  # label in the data sets only; never a verdict

CATEGORY_NAMES: dict[str, str] = {
    S1: "Violent Crimes",
    S2: "Non-Violent Crimes",
    S3: "Sex-Related Crimes",
    S4: "Child Sexual Exploitation",
    S5: "Defamation",
    S6: "Specialized Advice",
    S7: "Privacy",
    S8: "Intellectual Property",
    S9: "Indiscriminate Weapons",
    S10: "Hate",
    S11: "Suicide & Self-Harm",
    S12: "Sexual Content",
    S13: "Elections",
    S14: "Code Interpreter Abuse",
    PROMPT_INJECTION: "Prompt Injection",
    JAILBREAK: "Jailbreak",
    SECRETS: "Secrets / Credentials",
    INVISIBLE_TEXT: "Invisible / Hidden Text",
}
HARM_CATEGORIES: tuple[str, ...] = tuple(f"S{i}" for i in range(1, 15))
ALL_CATEGORIES: tuple[str, ...] = tuple(CATEGORY_NAMES)

ALLOW = "allow"
FLAG = "flag"
BLOCK = "block"
_RANK = {ALLOW: 0, FLAG: 1, BLOCK: 2}

RULES = "rules"
EMBEDDING = "embedding"


@dataclass(frozen=True)
class Verdict:
    category: str
    score: float
    action: str
    classifier: str
    version: str
    detail: str = ""
    # The score that would have blocked (the classifier's bar for this category and source); None for rules.
    block_at: float | None = None

    @property
    def name(self) -> str:
        return CATEGORY_NAMES.get(self.category, self.category)


def action_rank(action: str) -> int:
    return _RANK[action]


def worst_first(verdicts: Iterable[Verdict]) -> list[Verdict]:
    """The verdicts, most severe action first, then highest score."""
    return sorted(verdicts, key=lambda v: (-_RANK[v.action], -v.score))


def worst_action(verdicts: Iterable[Verdict]) -> str:
    """The most severe action among the verdicts; ``allow`` when there are none."""
    worst = ALLOW
    for v in verdicts:
        if _RANK[v.action] > _RANK[worst]:
            worst = v.action
    return worst
