"""Exact rules: things a regex decides better than a model (credentials, hidden characters,
textbook injection phrases, a handful of unambiguous abuse requests)."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from switchyard.libs.safety.credentials import find_secrets
from switchyard.libs.safety.taxonomy import INVISIBLE_TEXT, JAILBREAK, PROMPT_INJECTION, S2, S4, S9, S11, SECRETS

RULES_VERSION = "rules-2026.12.3"


@dataclass(frozen=True)
class RuleHit:
    category: str
    score: float
    detail: str


# --- hidden characters -------------------------------------------------------------------------

_TAG = re.compile("[\U000e0000-\U000e007f]")  # Unicode tags: invisible ASCII ("ASCII smuggling")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")  # embeddings/overrides/isolates (Trojan Source)
_ZERO_WIDTH = re.compile("[\u200b\u200c\u2060-\u2064\u180e\u00ad\u034f\u115f\u1160\u3164\ufeff]")
_ZWJ = "\u200d"
_VS_SUPPLEMENT = re.compile("[\U000e0100-\U000e01ef]")  # variation selectors used to smuggle bytes
_STRIP = re.compile(
    "[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069\u200b-\u200f\u2060-\u2064\u180e\u00ad\u034f"
    "\ufeff\U000e0100-\U000e01ef]"
)


def decode_tags(text: str) -> str:
    """The ASCII a run of tag characters spells (what a model would read but a human cannot see)."""
    return "".join(chr(ord(c) - 0xE0000) for c in _TAG.findall(text) if 0x20 <= ord(c) - 0xE0000 < 0x7F)


def normalize(text: str) -> str:
    """What the classifiers read: hidden characters removed, compatibility forms folded
    (fullwidth letters, ligatures), so obfuscation does not hide a phrase from them."""
    return unicodedata.normalize("NFKC", _STRIP.sub("", text))


def _emoji_zwj_only(text: str) -> bool:
    # ZWJ between two pictographs builds emoji (family, professions): legitimate everywhere.
    for i, ch in enumerate(text):
        if ch != _ZWJ:
            continue
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        if not (before and after and ord(before) > 0x2000 and ord(after) > 0x2000):
            return False
    return True


def invisible_hits(text: str) -> list[RuleHit]:
    hits: list[RuleHit] = []
    tags = _TAG.findall(text)
    if tags:
        hidden = decode_tags(text)
        detail = f"{len(tags)} Unicode tag characters; hidden text: {hidden[:80]!r}"
        hits.append(RuleHit(INVISIBLE_TEXT, 1.0, detail))
    bidi = _BIDI.findall(text)
    if bidi:
        hits.append(RuleHit(INVISIBLE_TEXT, 0.9, f"{len(bidi)} bidirectional override/isolate characters"))
    zw = _ZERO_WIDTH.findall(text)
    zwj = text.count(_ZWJ)
    if zwj and not _emoji_zwj_only(text):
        zw.extend([_ZWJ] * zwj)
    if zw:
        # One stray BOM or soft hyphen from a copy-paste is noise; several mean intent.
        score = 0.6 if len(zw) < 3 else 0.9
        hits.append(RuleHit(INVISIBLE_TEXT, score, f"{len(zw)} zero-width characters"))
    vs = _VS_SUPPLEMENT.findall(text)
    if len(vs) >= 4:
        hits.append(RuleHit(INVISIBLE_TEXT, 0.9, f"{len(vs)} supplementary variation selectors"))
    return hits


# --- credentials -------------------------------------------------------------------------------


def secret_hits(text: str) -> list[RuleHit]:
    labels = sorted({s.label for s in find_secrets(text)})
    return [RuleHit(SECRETS, 1.0, ", ".join(labels))] if labels else []


# --- injection, jailbreak, abuse ---------------------------------------------------------------

_PREV = (
    r"(?:all |any |the |your |my |these |those )*"
    r"(?:previous|prior|above|preceding|earlier|former|original|initial|system)"
)
_INSTR = r"(?:instructions?|prompts?|rules|directions|directives|guidelines|messages|context|constraints)"

# Each rule with what every match of it contains, as lower-case ASCII text: a tuple of clauses, each a tuple
# of words of which at least one is in the match. The stream guard skips the rules on a released window
# that fails a clause of every rule in force (``could_match``), instead of running them all on every word.
# Derived from each pattern by hand and checked on text generated from the patterns (tests/safety/test_rules.py).
_RULES: tuple[tuple[str, float, str, str, tuple[tuple[str, ...], ...]], ...] = (
    (
        PROMPT_INJECTION,
        0.97,
        "override of earlier instructions",
        rf"\b(?:ignore|disregard|forget|override|bypass|skip)\b[\s,]+"
        rf"(?:about |everything |what (?:was|you were) told )?{_PREV}\s+{_INSTR}",
        (
            ("ignore", "disregard", "forget", "override", "bypass", "skip"),
            ("previous", "prior", "above", "preceding", "earlier", "former", "original", "initial", "system"),
            (
                "instruction",
                "prompt",
                "rules",
                "direction",
                "directive",
                "guideline",
                "message",
                "context",
                "constraint",
            ),
        ),
    ),
    (
        PROMPT_INJECTION,
        0.95,
        "request for the system prompt",
        r"\b(?:reveal|show|print|output|repeat|display|leak|tell me|give me|what (?:is|are))\b"
        r"[^.?!\n]{0,30}"
        r"\b(?:your|the)\s+(?:system|hidden|secret|initial|original)\s+(?:prompt|instructions?|message)",
        (
            ("reveal", "show", "print", "output", "repeat", "display", "leak", "tell", "give", "what"),
            ("your", "the"),
            ("system", "hidden", "secret", "initial", "original"),
            ("prompt", "instruction", "message"),
        ),
    ),
    (
        PROMPT_INJECTION,
        0.95,
        "chat-template control tokens",
        r"<\|(?:im_start|im_end|system|start_header_id|eot_id)\|>|\[/?INST\]|<</?SYS>>",
        (("<|", "inst]", "sys>>"),),
    ),
    (
        PROMPT_INJECTION,
        0.9,
        "injected instructions addressed to the AI",
        r"\b(?:new|updated|real|actual)\s+(?:system\s+)?instructions?\s*:"
        r"|\b(?:note|attention|message)\s+to\s+(?:the\s+)?(?:ai|assistant|llm|language model|chatbot)\b",
        (("instruction", "note", "attention", "message"),),
    ),
    (
        JAILBREAK,
        0.97,
        "DAN / do-anything-now persona",
        r"\byou\s+are\s+(?:now\s+)?DAN\b|\bdo\s+anything\s+now\b|\bact\s+as\s+DAN\b",
        (("dan", "anything"), ("you", "anything", "act")),
    ),
    (
        JAILBREAK,
        0.95,
        "developer/god mode",
        r"\b(?:developer|god|jailbreak|unrestricted|evil)\s+mode\b[^.\n]{0,20}\b(?:enabled|activated|on)\b"
        r"|\benable\s+(?:developer|god|jailbreak)\s+mode\b",
        (("mode",), ("developer", "god", "jailbreak", "unrestricted", "evil")),
    ),
    (
        JAILBREAK,
        0.93,
        "request to drop restrictions",
        r"\b(?:you\s+(?:have|are\s+under)|with|there\s+are)\s+no\s+(?:rules|restrictions|guidelines|filters|limits|ethics)\b"
        r"[^.\n]{0,40}\b(?:anymore|now|any\s*more)\b"
        r"|\bwithout\s+(?:any\s+)?(?:ethical|moral|content)\s+(?:restrictions|guidelines|filters|limits)\b"
        r"|\bpretend\s+(?:that\s+)?you\s+(?:have|are)\s+(?:no|not\s+bound|free\s+from|an?\s+unfiltered)",
        (("rules", "restriction", "guideline", "filter", "limit", "ethic", "pretend"),),
    ),
    (
        S9,
        0.95,
        "explosive device instructions",
        r"\bhow\s+(?:do\s+i|to|can\s+i|would\s+i)\s+(?:make|build|assemble)\s+(?:a\s+)?(?:pipe\s+)?bomb\b",
        (("bomb",), ("how",), ("make", "build", "assemble")),
    ),
    (
        S4,
        1.0,
        "child sexual abuse material",
        r"\b(?:child|kiddie|underage|minor)\s+porn\w*|\bcsam\b|\bsexual\s+(?:pictures|images|photos|videos)\s+of\s+(?:children|minors|kids)\b",
        (("porn", "csam", "sexual"),),
    ),
    (
        S11,
        0.95,
        "stated intent of suicide",
        r"\bi\s+(?:want|am\s+going|'m\s+going|plan|intend)\s+to\s+(?:kill\s+myself|end\s+my\s+life|commit\s+suicide)\b",
        (("myself", "life", "suicide"), ("want", "going", "plan", "intend")),
    ),
    (
        S2,
        0.95,
        "drug synthesis",
        r"\bhow\s+(?:do\s+i|to|can\s+i)\s+(?:make|cook|synthesi[sz]e)\s+(?:crystal\s+)?(?:meth|methamphetamine|fentanyl)\b",
        (("meth", "fentanyl"), ("how",), ("make", "cook", "synthesi")),
    ),
)

_PHRASES: tuple[tuple[str, float, str, re.Pattern[str]], ...] = tuple(
    (cat, score, detail, re.compile(rx, re.IGNORECASE)) for cat, score, detail, rx, _ in _RULES
)
_NEEDS: dict[str, tuple[tuple[tuple[str, ...], ...], ...]] = {}
for _rule in _RULES:
    _NEEDS[_rule[0]] = (*_NEEDS.get(_rule[0], ()), _rule[4])
PHRASE_CATEGORIES = frozenset(_NEEDS)


def could_match(text: str, categories: frozenset[str]) -> bool:
    """False only when no phrase rule of ``categories`` can match ``text``, nor any other rule find anything
    but secrets (hidden characters are outside ASCII): callers skip ``rule_hits`` then. True for other
    scripts, where case folding and normalization widen what a rule reads."""
    if not text.isascii():
        return True
    low = text.lower()
    # Plain loops: this runs on every release of every answer, and generator expressions cost twice as much.
    for clauses in _needs_of(categories):
        for clause in clauses:
            for word in clause:
                if word in low:
                    break
            else:
                break  # a clause with none of its words: this rule cannot match
        else:
            return True
    return False


@functools.lru_cache(maxsize=64)
def _needs_of(categories: frozenset[str]) -> tuple[tuple[tuple[str, ...], ...], ...]:
    return tuple(clauses for cat in sorted(categories) for clauses in _NEEDS.get(cat, ()))


def phrase_hits(text: str) -> list[RuleHit]:
    best: dict[str, RuleHit] = {}
    for cat, score, detail, rx in _PHRASES:
        if rx.search(text) and (cat not in best or best[cat].score < score):
            best[cat] = RuleHit(cat, score, detail)
    return list(best.values())


def rule_hits(text: str, *, secrets: bool = True) -> list[RuleHit]:
    """All rule findings for ``text``; phrase rules read the normalized form and any tag-smuggled text.

    ``secrets=False`` skips credential scanning (the costliest rule) where nobody acts on it: model
    output, whose secrets are redacted instead."""
    hits = secret_hits(text) if secrets else []
    if text.isascii():
        # Every hidden character is outside ASCII and NFKC leaves ASCII as it is: the phrase rules alone
        # remain (this runs on every release of every answer, so the skipped passes are per-token work).
        return hits + phrase_hits(text)
    hits = invisible_hits(text) + hits
    clean = normalize(text)
    hidden = decode_tags(text)
    hits += phrase_hits(clean + ("\n" + hidden if hidden else ""))
    return hits
