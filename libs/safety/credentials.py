"""Credential patterns, shared by the input rules (block) and output redaction (mask).

Each pattern reports the span of the secret value only (group ``v`` when present), never the
label before it: "password: hunter2!" becomes "password: [secret redacted]", and a streamed
answer can release the label before the value arrives without the final redaction disagreeing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SecretPattern:
    label: str
    regex: re.Pattern[str]


def _p(label: str, pattern: str, flags: int = 0) -> SecretPattern:
    return SecretPattern(label, re.compile(pattern, flags))


_B = r"(?<![A-Za-z0-9_\-])"  # token start: not glued to a longer identifier
_E = r"(?![A-Za-z0-9_\-])"

SECRET_PATTERNS: tuple[SecretPattern, ...] = (
    _p(
        "private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    _p("Anthropic API key", _B + r"sk-ant-[A-Za-z0-9_\-]{20,}" + _E),
    _p("OpenAI-style API key", _B + r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}" + _E),
    _p("Stripe key", _B + r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}" + _E),
    _p(
        "AWS access key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Z0-9])",
    ),
    _p(
        "AWS secret key",
        r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
    ),
    _p("GitHub token", _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})" + _E),
    _p("GitLab token", _B + r"glpat-[A-Za-z0-9_\-]{20,}" + _E),
    _p("Slack token", _B + r"xox[abposr]-[A-Za-z0-9\-]{10,}" + _E),
    _p("Google API key", _B + r"AIza[0-9A-Za-z_\-]{35}" + _E),
    _p("Hugging Face token", _B + r"hf_[A-Za-z0-9]{30,}" + _E),
    _p("JSON Web Token", _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _E),
    _p("bearer token", r"(?i:\bbearer)\s+(?P<v>[A-Za-z0-9_\-.=+/]{20,})"),
    _p(
        "connection string password",
        r"\b[a-z][a-z0-9+.\-]{1,20}://[^\s:/@]+:(?P<v>[^\s@/]{3,})@[^\s/]+",
    ),
    _p(
        "password",
        # A label, then ":" / "=" / "is", then a value. Quoted values always count; bare ones must
        # carry a digit or symbol, so "password: forgotten" or "password = getpass()" do not.
        r"(?i:(?<![A-Za-z0-9])(?:password|passwd|pwd|passphrase|pass ?code|pin code"
        r"|secret(?:[_ ]?key)?|api[_ ]?key|access[_ ]?token|auth[_ ]?token|client[_ ]?secret"
        r"|private[_ ]?key))"
        r"[\"']?\s*(?:[:=]|\bis\b)\s*"
        r"(?:(?P<q>[\"'])(?P<v>[^\"'\s]{4,})(?P=q)"
        r"|(?P<v2>(?=[^\s]*[0-9!#%&*^~@?])(?![$%{<(\[])[^\s\"'`,;()\[\]{}<>]{6,}))",
    ),
)

# A credential value this boring is a placeholder in docs or a question, not a leak.
_PLACEHOLDER = re.compile(
    r"(?i)^(?:x+|\*+|\.+|-+|<.*>|\{.*\}|\$\{.*\}|your[_\-].*|my[_\-]?password.*|example.*|changeme|"
    r"password\d*|123456\d*|redacted|none|null|true|false|os\.environ.*|env\..*|process\.env.*)$"
)


@dataclass(frozen=True)
class SecretMatch:
    label: str
    start: int
    end: int


def find_secrets(text: str, pos: int = 0) -> Iterator[SecretMatch]:
    """Every credential value in ``text`` (overlaps allowed; callers resolve them)."""
    for sp in SECRET_PATTERNS:
        for m in sp.regex.finditer(text, pos):
            group = next((g for g in ("v", "v2") if g in m.re.groupindex and m.group(g)), None)
            start, end = m.span(group) if group else m.span()
            value = text[start:end].rstrip(".")
            end = start + len(value)
            if group and _PLACEHOLDER.match(value):
                continue
            if end > start:
                yield SecretMatch(sp.label, start, end)


# A private key header that has started but not finished arriving: everything after it is
# held back by the stream guard until the block is complete.
OPEN_SECRET = re.compile(r"-----BEGIN[A-Z0-9 ]*(?:-{0,5})\Z")
