"""Credential patterns, shared by the input rules (block) and output redaction (mask).

Each pattern reports the span of the secret value only (group ``v`` when present), never the
label before it: "password: hunter2!" becomes "password: [secret redacted]", and a streamed
answer can release the label before the value arrives without the final redaction disagreeing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
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
_B64 = r"[A-Za-z0-9+/=]"
_PEM_HEAD = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
# Labels of a generic secret assignment ("api_key = ...", "client_secret: ..."); an optional
# identifier prefix ("DB_", "PG", "stripe_") may come before them.
_LABEL = (
    r"(?i:(?<![A-Za-z0-9])(?:[A-Za-z0-9]{0,20}[_\-.]|PG|MYSQL|REDIS)?"
    r"(?:password|passwd|pwd|passphrase|pass ?code|pin code|(?<=[_\-.])pass"
    r"|secret(?:[_ \-]?(?:access[_ \-]?)?key)?|client[_ \-]?secret|app[_ \-]?secret|api[_ \-]?secret"
    r"|api[_ \-]?key|apikey|access[_ \-]?key|access[_ \-]?token|auth[_ \-]?token|refresh[_ \-]?token"
    r"|bot[_ \-]?token|private[_ \-]?token|token|private[_ \-]?key|signing[_ \-]?key|encryption[_ \-]?key"
    r"|master[_ \-]?key|account[_ \-]?key|credentials?)(?![A-Za-z0-9]))"
)

SECRET_PATTERNS: tuple[SecretPattern, ...] = (
    # A whole PEM block; or a truncated one (no END line) when what follows the header is key
    # material or nothing yet — "what does -----BEGIN RSA PRIVATE KEY----- mean?" is a question.
    _p(
        "private key",
        _PEM_HEAD + r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"|(?=(?:\s|\\n)*(?:Proc-Type:|" + _B64 + r"{16,})|(?:" + _B64 + r"|\s|\\n|-)*\Z)[\s\S]*\Z)",
    ),
    # Key material without its header: OpenSSH ("openssh-key-v1"), PKCS#1 RSA, PKCS#8, SEC1 EC.
    _p(
        "private key",
        r"(?<![A-Za-z0-9+/])(?:b3BlbnNzaC1rZXktdjE|MII[A-Za-z0-9+/]{2,3}IBAAK|"
        r"MII[A-Za-z0-9+/]{2,3}IBADANBgkqhkiG9w0BAQEFAAS|MHcCAQEEI)" + _B64 + r"{12,}",
    ),
    _p("Anthropic API key", _B + r"sk-ant-(?:api|admin|sid)?[0-9]{0,2}-?[A-Za-z0-9_\-]{20,}" + _E),
    _p("OpenAI-style API key", _B + r"sk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}" + _E),
    _p("Stripe key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}" + _E),
    _p("Stripe webhook secret", _B + r"whsec_[A-Za-z0-9]{24,}" + _E),
    _p(
        "AWS access key",
        r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])",
    ),
    _p(
        "AWS secret key",
        r"(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9/+=]{36,44})(?![A-Za-z0-9/+=])",
    ),
    _p(
        "GitHub token",
        _B + r"(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255}|ghv1_[A-Za-z0-9]{30,})" + _E,
    ),
    _p(
        "GitLab token",
        _B + r"(?:gl(?:pat|dt|rt|ptt|cbt|oas|ft|imt|agent|soat)-[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,})" + _E,
    ),
    _p("Slack token", _B + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,})" + _E),
    _p("Slack webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{20,}"),
    _p("Google API key", _B + r"AIza[0-9A-Za-z_\-]{33,40}" + _E),
    _p("Google OAuth secret", _B + r"(?:GOCSPX-[A-Za-z0-9_\-]{20,}|ya29\.[A-Za-z0-9_\-]{30,})" + _E),
    _p("SendGrid API key", _B + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}" + _E),
    _p("Twilio API key", _B + r"SK[0-9a-fA-F]{32}" + _E),
    _p(
        "Twilio auth token",
        r"(?i:twilio[^\n]{0,30}?(?:auth|token|secret))[^\n]{0,20}?(?P<v>(?<![0-9a-fA-F])[0-9a-fA-F]{32})(?![0-9a-fA-F])",
    ),
    _p("npm token", _B + r"npm_[A-Za-z0-9]{36}" + _E),
    _p("PyPI token", _B + r"pypi-AgE[A-Za-z0-9_\-]{50,}" + _E),
    _p("Hugging Face token", _B + r"(?:hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})" + _E),
    _p(
        "Azure storage key",
        r"(?i:(?:AccountKey|SharedAccessKey|SharedAccessSignature=sv)=)(?P<v>[A-Za-z0-9+/=%&:\-]{20,})",
    ),
    _p("DigitalOcean token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E),
    _p("Shopify token", _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E),
    _p("Telegram bot token", r"(?<![0-9A-Za-z])\d{8,10}:[A-Za-z0-9_\-]{35}" + _E),
    _p(
        "Discord bot token",
        # The first part is the base64 of a 17-19 digit user id: 23-26 characters.
        r"(?<![A-Za-z0-9_\-.])[MNO][A-Za-z0-9_\-]{22,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}" + _E,
    ),
    _p("Discord webhook", r"discord(?:app)?\.com/api/webhooks/\d{5,}/[A-Za-z0-9_\-]{30,}"),
    _p("JSON Web Token", _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _E),
    _p("bearer token", r"(?i:\bbearer)\s+(?P<v>[A-Za-z0-9_\-.=+/]{20,})"),
    _p(
        "connection string password",
        # scheme://user:password@host (user may be empty: redis://:pw@host), any scheme
        # (postgres, mysql, mongodb+srv, redis, amqp, smtp, jdbc:postgresql, ...).
        r"\b[a-z][a-z0-9+.\-]{1,20}://[^\s:/@]*:(?P<v>[^\s@/]{3,})@[^\s/]+",
    ),
    _p(
        "connection string password",
        # JDBC / ODBC / ADO style: ...;Password=...; or ?user=x&password=y
        r"(?i:(?:[?&;]|\bjdbc:\S*?[?&;])(?:password|pwd|pass)=)(?P<v>[^&;\s\"']{3,})",
    ),
    _p(
        "database password",
        # mysql -u root -pSECRET (password glued to -p); sshpass -p SECRET
        r"(?i:\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n]*?\s-p)(?P<v>[^\s\"']{4,})"
        r"|(?i:\bsshpass\s+-p\s*)(?P<v2>[^\s\"']{4,})",
    ),
    _p(
        "password",
        # A label, then ":" / "=" / "is", then a value. Quoted values always count; bare ones must
        # carry a digit or symbol, so "password: forgotten" or "password = getpass()" do not.
        # Token/key labels additionally need a high-entropy value (see ``_weak_generic``).
        _LABEL + r"[\"']?\s*(?:[:=]|\bis\b)\s*"
        r"(?:(?P<q>[\"'])(?P<v>[^\"'\s]{4,})(?P=q)"
        r"|(?P<v2>(?=[^\s]*[0-9!#%&*^~@?])(?![$%{<(\[])[^\s\"'`,;()\[\]{}<>]{6,}))",
    ),
)

# A credential value this boring is a placeholder in docs or a question, not a leak.
_PLACEHOLDER = re.compile(
    r"(?i)^(?:x+|\*+|\.+|-+|<.*>|\{.*\}|\$\{.*\}|\$[A-Z_]+|%[A-Z_]+%|your[_\-].*|my[_\-]?password.*|example.*|changeme"
    r"|password\d*|pass|secret|pwd|123456\d*|redacted|none|null|true|false|os\.environ.*|env\..*|process\.env.*"
    r"|getenv.*|config\..*|settings\..*|self\..*)$"
)
# Anywhere in a value (prefixed tokens included): doc placeholders, not keys.
_PLACEHOLDER_PART = re.compile(
    r"(?i)x{5,}|\*{3,}|\.{3,}|\u2026|<[^>]*>|\{\{|\$\{|example|placeholder|your[_\-]?(?:api|key|token|secret|pass)"
    r"|redacted|dummy|changeme|insert[_\-]?|replace[_\-]?me|(.)\1{7,}"
)
_PASSWORD_WORDS = re.compile(r"(?i)password|passwd|pwd|passphrase|pass ?code|pin code|pass\b")


def _entropy(s: str) -> float:
    return -sum(c / len(s) * math.log2(c / len(s)) for c in Counter(s).values())


def _weak_generic(label_text: str, value: str) -> bool:
    """A token/key/secret assignment whose value does not look random: "token: abc123!",
    "api_key = 'test'", "max_tokens=1024". Passwords are exempt (short human passwords leak too)."""
    if _PASSWORD_WORDS.search(label_text):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return len(value) < 12 or not (has_alpha and has_digit) or _entropy(value) < 3.0


@dataclass(frozen=True)
class SecretMatch:
    label: str
    start: int
    end: int


# Something every credential match contains, lower-cased: a label's last word followed by its ":" / "=" / "is",
# a scheme's "://", a PEM header, or a key format's fixed prefix. Text without one holds no credential, and the
# stream guard asks after every release of every answer: nearly every release skips the patterns above.
# Each entry is derived from the pattern it stands for (its match always contains the entry's text, case
# folded), which tests/safety/test_credentials.py checks on every example and on generated text.
_LABEL_WORDS = ("pass", "pwd", "code", "secret", "key", "token", "credential")  # in every label ending below
_LABELLED = re.compile(
    r"(?:password|passwd|passphrase|pass|pwd|code|secret|key|token|credentials?)[\"']?\s*(?:[:=]|is)"
)
_PREFIXES: tuple[str, ...] = (
    "signature=",  # Azure SharedAccessSignature (its AccountKey= / SharedAccessKey= end a label above)
    "twilio",
    "bearer",
    "mysql",
    "mariadb",
    "sshpass",
    "://",  # connection strings (webhooks keep their host below)
    "-----begin",
    "b3blbnnzac1yzxktdje",
    r"mii[a-z0-9+/]{2,3}iba",
    "mhccaqeei",
    "sk-",
    "sk_(?:live|test)_",
    "rk_(?:live|test)_",
    "whsec_",
    *(p + "[a-z0-9]{16}" for p in ("akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva")),
    "a3t[a-z0-9]{17}",
    "gh[pousr]_",
    "github_pat_",
    "ghv1_",
    "gl(?:pat|dt|rt|ptt|cbt|oas|ft|imt|agent|soat)-",
    "gr1348941",
    "xox[abposre]-",
    "xapp-",
    r"hooks\.slack\.com/",
    "aiza",
    "gocspx-",
    r"ya29\.",
    r"sg\.",
    "sk[0-9a-f]{32}",
    "npm_",
    "pypi-age",
    "hf_",
    "api_org_",
    "do[opr]_v1_",
    "shp(?:at|ca|pa|ss)_",
    r"\d{8}:",  # Telegram
    r"\.[a-z0-9_\-]{6}\.[a-z0-9_\-]{27}",  # Discord bot token: its two dots and what lies between and after
    "discord",
    r"eyj[a-z0-9_\-]{8}",  # JSON Web Token
)
# The longest text one of the prefixes matches (tests check it against the regex engine's own figure).
PREFIX_SPAN = 35


def _by_first_char(alternatives: tuple[str, ...]) -> str:
    """One alternation grouped by first character: the regex engine tries a single group per position
    instead of every entry (3x faster on prose)."""
    groups: dict[str, list[str]] = {}
    for alt in alternatives:
        head = alt[:2] if alt[0] == "\\" else alt[0]
        groups.setdefault(head, []).append(alt[len(head) :])
    out = []
    for head, tails in groups.items():
        if head == r"\d":
            out += [head + t for t in tails]
        else:
            out.append(re.escape(head) if head in "-:" else head)
            out[-1] += "(?:" + "|".join(tails) + ")"
    return "|".join(out)


_PREFIXED = re.compile(_by_first_char(_PREFIXES))
# Other scripts: the same entries, case-insensitive as the patterns' labels are ("K" is a "k" to them).
_HINT_ANY_CASE = re.compile(_LABELLED.pattern + "|" + _PREFIXED.pattern, re.IGNORECASE)


def _labelled(low: str) -> bool:
    for word in _LABEL_WORDS:
        if word in low:
            return _LABELLED.search(low) is not None
    return False


def may_hold_secret(text: str, pos: int = 0) -> bool:
    """False only when no pattern can match in ``text`` from ``pos`` on (lookbehinds aside)."""
    rest = text[pos:] if pos else text
    if rest.isascii():
        low = rest.lower()
        return _labelled(low) or _PREFIXED.search(low) is not None
    return _HINT_ANY_CASE.search(rest) is not None


class SecretHint:
    """``may_hold_secret`` for one stream, whose text only grows and whose ``pos`` only moves on: the prefixes
    are looked for only in text not searched before (and the last ``PREFIX_SPAN`` characters before it)."""

    def __init__(self) -> None:
        self._seen = -1  # start of a prefix match found, -1: none known
        self._from = -1  # no prefix match lies within text[_from:_to] (-1: nothing known)
        self._to = -1

    def __call__(self, text: str, pos: int = 0) -> bool:
        rest = text[pos:] if pos else text
        if not rest.isascii():
            self._seen = self._from = -1
            return _HINT_ANY_CASE.search(rest) is not None
        low = rest.lower()
        if _labelled(low) or self._seen >= pos:
            return True
        lo = pos
        if self._seen < 0 and 0 <= self._from <= pos:
            # A match within the new window that is not within the searched text ends after it.
            lo = max(pos, self._to - PREFIX_SPAN + 1)
        m = _PREFIXED.search(low, lo - pos)
        if m is not None:
            self._seen, self._from = pos + m.start(), -1
            return True
        self._seen, self._from, self._to = -1, pos, len(text)
        return False


def find_secrets(text: str, pos: int = 0, hint: SecretHint | None = None) -> Iterator[SecretMatch]:
    """Every credential value in ``text`` (overlaps allowed; callers resolve them); a stream passes its
    ``hint``, the same pre-filter with less to search each time."""
    if not (hint(text, pos) if hint is not None else may_hold_secret(text, pos)):
        return
    yield from _scan(text, pos)


def _scan(text: str, pos: int) -> Iterator[SecretMatch]:
    """``find_secrets`` without the pre-filter (tests hold the two equal)."""
    for sp in SECRET_PATTERNS:
        for m in sp.regex.finditer(text, pos):
            group = next((g for g in ("v", "v2") if g in m.re.groupindex and m.group(g)), None)
            start, end = m.span(group) if group else m.span()
            value = text[start:end].rstrip(".")
            end = start + len(value)
            if end <= start:
                continue
            # Key blocks are exempt: their base64 has runs ("AAAAAAAA") and may be cut with "...".
            if sp.label != "private key" and _PLACEHOLDER_PART.search(value):
                continue
            if group and _PLACEHOLDER.match(value):
                continue
            if sp.label == "password" and _weak_generic(text[m.start() : start], value):
                continue
            yield SecretMatch(sp.label, start, end)


# A private key header that has started but not finished arriving: everything after it is
# held back by the stream guard until the block is complete.
OPEN_SECRET = re.compile(r"-----BEGIN[A-Z0-9 ]*(?:-{0,5})\Z")
