"""PII and credential redaction for model output.

Spans never contain whitespace that follows a letter (phones and cards only have spaces between
digit groups; credential spans are values without their label). The stream guard relies on that:
it only cuts the stream after whitespace that does not follow a digit, so no span can straddle
a cut and the pieces it releases concatenate to exactly ``redact(full_text)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from switchyard.libs.safety.credentials import SecretHint, find_secrets

EMAIL = "email"
PHONE = "phone"
CARD = "card"
NATIONAL_ID = "national_id"
SECRET = "secret"

PLACEHOLDERS: dict[str, str] = {
    EMAIL: "[email redacted]",
    PHONE: "[phone redacted]",
    CARD: "[card redacted]",
    NATIONAL_ID: "[national id redacted]",
    SECRET: "[secret redacted]",
}
# When spans overlap, the more specific finding wins (a card number also looks like a phone).
_PRIORITY = {SECRET: 0, CARD: 1, NATIONAL_ID: 2, EMAIL: 3, PHONE: 4}


@dataclass
class Redaction:
    kind: str
    start: int  # offsets into the original (unredacted) text
    end: int


_EMAIL = re.compile(
    r"(?<![\w.+\-%])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,62}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w\-])"
)
_PHONE = re.compile(
    # +CC then 2-5 groups, or North American (NXX) NXX-XXXX. Bare digit runs are not phones:
    # order numbers and tracking ids look like that.
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .\-]?\(\d{1,4}\))?(?:[ .\-]?\d{2,5}){2,5}"
    r"|(?:\(\d{3}\) ?|\d{3}[.\-])\d{3}[.\-]\d{4}"
    r"|\d{3} \d{3} \d{4}"
    r")(?![\w\-])"
)
_CARD = re.compile(
    r"(?<![\d\-])(?:"
    r"\d{4}(?P<sep>[ \-])\d{4}(?P=sep)\d{4}(?P=sep)\d{1,7}"  # 4-4-4-x (16-19 digits)
    r"|\d{4}(?P<sep2>[ \-])\d{6}(?P=sep2)\d{4,5}"  # Amex / Diners 4-6-5
    r"|\d{13,19}"
    r")(?![\d])"
)
_SSN = re.compile(r"(?<![\d\-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d\-])")
_SSN_LABELLED = re.compile(r"(?i:\b(?:ssn|social security(?: number| no\.?)?)\b)[\s#:]*(?P<v>\d{9})(?!\d)")
_UK_NINO = re.compile(r"(?<![A-Za-z0-9])(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z]{2}\d{6}[A-D](?![A-Za-z0-9])")
_DIGIT = re.compile(r"\d")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[A-Z0-9]{4}){2,7}[A-Z0-9]{1,4}(?![A-Za-z0-9])")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card_brand_ok(digits: str) -> bool:
    # Luhn alone passes one random number in ten; also requiring a real issuer prefix keeps
    # order and tracking numbers out.
    n = len(digits)
    if digits[0] == "4":
        return n in (13, 16, 19)
    p2, p4 = int(digits[:2]), int(digits[:4])
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if p2 in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return 14 <= n <= 19
    if digits.startswith(("6011", "65", "64", "62")) or 3528 <= p4 <= 3589:
        return 16 <= n <= 19
    return False


def _iban_ok(s: str) -> bool:
    r = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in r)) % 97 == 1


def find_pii(text: str, pos: int = 0, secret_hint: SecretHint | None = None) -> list[Redaction]:
    """All redactable spans at or after ``pos`` (lookbehind may read before it), non-overlapping.
    ``secret_hint``: a stream's (``find_secrets``), for a text that only grows and a ``pos`` that only moves on."""
    found: list[Redaction] = []
    for s in find_secrets(text, max(0, pos - 80), secret_hint):
        found.append(Redaction(SECRET, s.start, s.end))
    digit, at = _may_hold(text, pos)
    if digit:
        _numbers(text, pos, found)
    if at:
        for m in _EMAIL.finditer(text, pos):
            found.append(Redaction(EMAIL, *m.span()))
    found = [r for r in found if r.start >= pos]
    # Greedy by position; on overlap keep the higher-priority, then longer, span.
    found.sort(key=lambda r: (r.start, _PRIORITY[r.kind], -(r.end - r.start)))
    kept: list[Redaction] = []
    for r in found:
        if kept and r.start < kept[-1].end:
            prev = kept[-1]
            if (_PRIORITY[r.kind], -(r.end - r.start)) < (_PRIORITY[prev.kind], -(prev.end - prev.start)):
                kept[-1] = r
            continue
        kept.append(r)
    return kept


def _may_hold(text: str, pos: int) -> tuple[bool, bool]:
    """Whether ``text`` holds a digit, and an "@", from ``pos`` on. Every span but a secret's is kept only from
    ``pos`` on and holds a digit there (an e-mail, an "@"): the stream guard asks after every word, and most
    words of an answer have neither."""
    return _DIGIT.search(text, pos) is not None, text.find("@", pos) >= 0


def _numbers(text: str, pos: int, found: list[Redaction]) -> None:
    """Cards, national ids and phones (each holds a digit), appended to ``found`` in ``find_pii``'s order."""
    for m in _CARD.finditer(text, pos):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn_ok(digits) and _card_brand_ok(digits):
            found.append(Redaction(CARD, *m.span()))
    for m in _SSN.finditer(text, pos):
        found.append(Redaction(NATIONAL_ID, *m.span()))
    for m in _SSN_LABELLED.finditer(text, max(0, pos - 40)):
        found.append(Redaction(NATIONAL_ID, *m.span("v")))
    for m in _UK_NINO.finditer(text, pos):
        found.append(Redaction(NATIONAL_ID, *m.span()))
    for m in _IBAN.finditer(text, pos):
        if _iban_ok(m.group()):
            found.append(Redaction(NATIONAL_ID, *m.span()))
    for m in _PHONE.finditer(text, pos):
        if 7 <= sum(c.isdigit() for c in m.group()) <= 15:
            found.append(Redaction(PHONE, *m.span()))


def apply(text: str, spans: list[Redaction], offset: int = 0) -> str:
    """Replace ``spans`` (absolute offsets) inside ``text``, which starts at absolute ``offset``."""
    out: list[str] = []
    at = offset
    for r in spans:
        out.append(text[at - offset : r.start - offset])
        out.append(PLACEHOLDERS[r.kind])
        at = r.end
    out.append(text[at - offset :])
    return "".join(out)


def redact(text: str) -> tuple[str, list[Redaction]]:
    """Mask e-mails, phone numbers, payment cards (Luhn), national ids and credentials."""
    spans = find_pii(text)
    return apply(text, spans), spans
