"""Output safety for a streamed answer: hold back a little, redact, stop on a blocked category.

Why hold back at all: a phone number arriving as "+1 555" ... "123 4567" must never reach the
client half-sent, and a harmful sentence should be judged before it is shown. The guard only
releases text up to a *safe cut*: after whitespace that does not follow a digit, outside every
redaction span and outside any half-arrived private key. No redaction can straddle such a cut
(see ``redact``), so the released pieces concatenate to exactly ``redact(full_text)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from libs.safety.credentials import OPEN_SECRET
from libs.safety.guard import InputGuard
from libs.safety.policy import SafetyPolicy
from libs.safety.redact import Redaction, apply, find_pii
from libs.safety.taxonomy import BLOCK, EMBEDDING, FLAG, Verdict

_BOUNDARY = re.compile(r"[.!?;:][\"')\]]*\s+|\n\s*")
# A cut right after "555 " or "(555) " could split a phone or card number across releases.
_DIGITISH = frozenset("0123456789()+-")
# Text judged by the classifier per check: the new sentences plus a little context before them.
_CONTEXT_CHARS = 200
# A refusal names the harm it refuses ("I can't help you make explosives"); the classifier, trained
# on requests, scores the topic. Learned blocks on a refusal sentence are downgraded to flags.
_REFUSAL = re.compile(
    r"^\W*(?:I(?:'m| am) (?:sorry|afraid|unable|not able)|I (?:can(?:no|')t|won't|will not|must decline)"
    r"|Sorry,? (?:but )?I)",
    re.IGNORECASE,
)


@dataclass
class Release:
    text: str  # safe to send now, already redacted
    blocked: Verdict | None = None  # set once a blocked category appears: stop the stream
    redactions: list[Redaction] = field(default_factory=list)  # offsets into ``full_text``


class StreamGuard:
    """One per streamed answer. Not thread-safe: feed it from one task.

    ``guard`` decides what blocks: by default a rules-only ``InputGuard`` (cheap enough per
    delta); pass an embedding-backed one to also run the classifier once per finished sentence.
    """

    def __init__(
        self,
        holdback_chars: int = 48,
        policy: SafetyPolicy | None = None,
        *,
        guard: InputGuard | None = None,
    ) -> None:
        self.holdback_chars = holdback_chars
        self.policy = policy or (guard.policy if guard else SafetyPolicy())
        self.guard = guard or InputGuard(self.policy, use_embeddings=False)
        self._rules = InputGuard(self.policy, use_embeddings=False)
        self.full_text = ""
        self.released_text = ""
        self.redactions: list[Redaction] = []
        self.flags: list[Verdict] = []
        self.blocked: Verdict | None = None
        self._cut = 0  # offset in full_text up to which text has been released
        self._classified_to = 0
        self._finished = False

    # --- public API ----------------------------------------------------------------------------

    def feed(self, delta: str) -> Release:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self.full_text += delta
        if self.blocked is not None:
            return Release("", self.blocked)
        return self._release_to(self._safe_cut(), final=False)

    def finish(self) -> Release:
        """Flush whatever is held back (the answer is complete)."""
        if self._finished:
            return Release("", self.blocked)
        self._finished = True
        if self.blocked is not None:
            return Release("", self.blocked)
        return self._release_to(len(self.full_text), final=True)

    def final_check(self) -> list[Verdict]:
        """Judge the whole answer (original text) before it is saved; worst verdict first."""
        return _soften_refusal(self.full_text, self.guard.check(self.full_text, source="model"))

    # --- internals -----------------------------------------------------------------------------

    def _safe_cut(self) -> int:
        text, cut = self.full_text, self._cut
        limit = len(text) - self.holdback_chars
        for m in _BOUNDARY.finditer(text, max(cut, limit)):
            limit = max(limit, m.end())
        opened = OPEN_SECRET.search(text, cut)
        if opened:
            limit = min(limit, opened.start())
        for p in range(min(limit, len(text)), cut, -1):
            if not text[p - 1].isspace():
                continue
            q = p - 1
            while q > cut and text[q - 1].isspace():
                q -= 1
            if q > 0 and text[q - 1] in _DIGITISH:
                continue
            return p
        return cut

    def _release_to(self, p: int, *, final: bool) -> Release:
        cut = self._cut
        spans = find_pii(self.full_text, cut)
        if not final:
            # The cut rules keep spans whole; this also holds back a span that touches the end of
            # the text so far (a private key still arriving, an e-mail whose domain may go on).
            n = len(self.full_text)
            for s in spans:
                if s.start < p < s.end or (s.start < p and s.end >= n):
                    p = s.start
        if p <= cut:
            return Release("")
        verdict, p = self._judge(p, final)
        if p <= cut:
            return Release("")
        if verdict is not None:
            self.blocked = verdict
            return Release("", verdict)
        ready = [s for s in spans if s.end <= p]
        text = apply(self.full_text[cut:p], ready, offset=cut)
        self._cut = p
        self.released_text += text
        self.redactions += ready
        return Release(text, None, ready)

    def _judge(self, p: int, final: bool) -> tuple[Verdict | None, int]:
        """Check the text up to ``p`` before it is released; returns (block, how far to release).

        Rules run on every release. With an embedding guard, the classifier runs once at least
        ``holdback_chars`` (or a sentence) is waiting, and text is released only after it was
        classified: so the window is held until judged instead of leaking ahead of the model.
        """
        verdicts = self._rules.check(self.full_text[max(0, self._cut - _CONTEXT_CHARS) : p], source="model")
        if self.guard.use_embeddings:
            pending = self.full_text[self._classified_to : p]
            due = final or len(pending) >= max(self.holdback_chars, 16) or bool(_BOUNDARY.search(pending))
            if due and pending.strip():
                # One verdict list per sentence, so a refusal only softens its own sentence.
                sentences = _sentences(self.full_text[self._sentence_start(self._classified_to) : p])
                for sent, learned in zip(sentences, self.guard.check_many(sentences, source="model"), strict=True):
                    verdicts += _soften_refusal(sent, [v for v in learned if v.classifier == EMBEDDING])
                self._classified_to = p
            elif not due:
                p = min(p, self._classified_to)
        self.flags += [v for v in verdicts if v.action == FLAG]
        blocks = [v for v in verdicts if v.action == BLOCK]
        return (max(blocks, key=lambda v: v.score) if blocks else None), p

    def _sentence_start(self, at: int) -> int:
        # The classifier sees whole sentences: back up to the start of the one ``at`` falls in,
        # but not into earlier sentences (a refusal before must not colour the next sentence).
        lo = max(0, at - _CONTEXT_CHARS)
        start = lo
        for m in _BOUNDARY.finditer(self.full_text, lo, at):
            start = m.end()
        return start


def _sentences(text: str) -> list[str]:
    out, at = [], 0
    for m in _BOUNDARY.finditer(text):
        out.append(text[at : m.end()])
        at = m.end()
    out.append(text[at:])
    return [s for s in out if s.strip()]


def _soften_refusal(text: str, verdicts: list[Verdict]) -> list[Verdict]:
    if not _REFUSAL.search(text):
        return verdicts
    return [
        replace(v, action=FLAG, detail="refusal") if v.classifier == EMBEDDING and v.action == BLOCK else v
        for v in verdicts
    ]
