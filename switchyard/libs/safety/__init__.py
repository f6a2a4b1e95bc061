"""Safety classifiers for Switchyard: input checks, output redaction and streaming guard.

Pure library (no bus, no HTTP). ``InputGuard`` for the safety_in stage, ``StreamGuard`` for
safety_out; ``redact`` on its own wherever text is shown or stored.
"""

from switchyard.libs.safety.classifier import EmbeddingClassifier
from switchyard.libs.safety.guard import InputGuard
from switchyard.libs.safety.policy import SafetyPolicy, Source, Threshold
from switchyard.libs.safety.redact import Redaction, luhn_ok, redact
from switchyard.libs.safety.rules import RULES_VERSION, normalize
from switchyard.libs.safety.stream import Release, StreamGuard
from switchyard.libs.safety.taxonomy import (
    ALL_CATEGORIES,
    ALLOW,
    BLOCK,
    CATEGORY_NAMES,
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
    Verdict,
    worst_action,
    worst_first,
)

__all__ = [
    "ALLOW",
    "ALL_CATEGORIES",
    "BLOCK",
    "CATEGORY_NAMES",
    "FLAG",
    "HARM_CATEGORIES",
    "INVISIBLE_TEXT",
    "JAILBREAK",
    "PROMPT_INJECTION",
    "RULES_VERSION",
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
    "SECRETS",
    "EmbeddingClassifier",
    "InputGuard",
    "Redaction",
    "Release",
    "SafetyPolicy",
    "Source",
    "StreamGuard",
    "Threshold",
    "Verdict",
    "luhn_ok",
    "normalize",
    "redact",
    "worst_action",
    "worst_first",
]
