"""Output safety for a streamed answer: release at once, redact exactly, stop on a blocked category.

Redaction needs only a short look-behind: the guard releases text up to a *safe cut*, after
whitespace that does not follow a digit, outside every redaction span and outside any half-arrived
private key. No redaction can straddle such a cut (see ``redact``), so the released pieces
concatenate to exactly ``redact(full_text)``, and no phone, card or key is ever half-sent.

Judging is separate from releasing. Finished sentences are handed out for the learned classifier
(``Release.to_judge``) and their verdicts come back through ``judged``. Two release policies:
- ``stream``: text goes out at the safe cut; a block found later stops the stream there, and
  what was already sent stays sent (the caller's record keeps ``released_text``).
- ``judged``: text goes out only once its sentence was judged (a sentence of latency, nothing
  unjudged is ever shown).
With ``judge_inline`` the guard calls its own classifier inside ``feed`` (a library user, the
eval); a service passes ``judge_inline=False`` and batches the sentences of all its streams.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from switchyard.libs.safety.classifier import CHUNK_CHARS
from switchyard.libs.safety.credentials import OPEN_SECRET, SecretHint
from switchyard.libs.safety.guard import InputGuard
from switchyard.libs.safety.policy import SafetyPolicy
from switchyard.libs.safety.redact import Redaction, apply, find_pii
from switchyard.libs.safety.rules import PHRASE_CATEGORIES, could_match
from switchyard.libs.safety.taxonomy import BLOCK, EMBEDDING, FLAG, SECRETS, Verdict, worst_first

ReleasePolicy = Literal["stream", "judged"]

_BOUNDARY = re.compile(r"[.!?;:][\"')\]]*\s+|\n\s*")
# A cut right after "555 " or "(555) " could split a phone or card number across releases.
_DIGITISH = frozenset("0123456789()+-")
# Rules see the released text with a little context before it: a phrase rule completed by this release
# starts at most this far back (the longest, with single spaces, spans under 80 characters). The window is
# read only when it holds the words some rule in force needs (`rules.could_match`).
_CONTEXT_CHARS = 96
# Text without sentence ends (code, lists) is still judged once this much has piled up.
_JUDGE_EVERY_CHARS = 240
# The end of the user's question judged before each answer sentence; question and sentence stay
# within one classifier chunk, or the question would be scored on its own.
_QUESTION_CHARS = 300
_QUESTION_MIN_CHARS = 40
# A refusal names the harm it refuses ("I can't help you make explosives"); the classifier, trained
# on requests, scores the topic. Learned blocks on a refusal sentence are downgraded to flags.
_REFUSAL = re.compile(
    r"^\W*(?:I(?:'m| am) (?:sorry|afraid|unable|not able)|I (?:can(?:no|')t|won't|will not|must decline)"
    r"|Sorry,? (?:but )?I)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Sentence:
    """A finished piece of the answer, ``full_text[start:end]``, waiting for the classifier."""

    start: int
    end: int
    text: str


@dataclass
class Release:
    text: str  # safe to send now, already redacted
    blocked: Verdict | None = None  # set once a blocked category appears: stop the stream
    redactions: list[Redaction] = field(default_factory=list)  # offsets into ``full_text``
    to_judge: list[Sentence] = field(default_factory=list)  # for the caller's classifier


class StreamGuard:
    """One per streamed answer. Not thread-safe: feed it from one task.

    ``guard`` decides what blocks: by default a rules-only ``InputGuard`` (cheap enough per
    delta); with an embedding-backed one, finished sentences also go through the classifier.
    """

    def __init__(
        self,
        holdback_chars: int = 0,
        policy: SafetyPolicy | None = None,
        *,
        guard: InputGuard | None = None,
        release: ReleasePolicy = "judged",
        judge_inline: bool = True,
        question: str = "",
    ) -> None:
        self.holdback_chars = holdback_chars
        self.policy = policy or (guard.policy if guard else SafetyPolicy())
        self.guard = guard or InputGuard(self.policy, use_embeddings=False)
        self._rules = InputGuard(self.policy, use_embeddings=False)
        # The phrase rules whose verdicts count on an answer: a window none of them could match is not read.
        # Where secrets count on answers too (a tenant's policy), every window is.
        self._rule_categories = frozenset(c for c in PHRASE_CATEGORIES if self.policy.applies(c, "model"))
        self._rules_every_window = self.policy.applies(SECRETS, "model")
        self._secret_hint = SecretHint()
        self.release = release
        self.judge_inline = judge_inline
        # Sentences are judged after the question they answer: "give 5 ml every 6 hours" is care after
        # a question about a child's fever, and the classifier alone cannot tell (docs/safety.md).
        self.question = question.strip()
        self.full_text = ""
        self.released_text = ""
        self.redactions: list[Redaction] = []
        self.flags: list[Verdict] = []
        self.blocked: Verdict | None = None
        self._cut = 0  # offset in full_text up to which text has been released
        self._queued_to = 0  # offset up to which sentences were handed out for judging
        self._outstanding: list[Sentence] = []  # handed out, verdict not back yet (in text order)
        self._finished = False

    @property
    def judging(self) -> bool:
        return self.guard.use_embeddings

    @property
    def judged_to(self) -> int:
        """Offset up to which every sentence has its verdict."""
        return self._outstanding[0].start if self._outstanding else self._queued_to

    # --- public API ----------------------------------------------------------------------------

    def feed(self, delta: str) -> Release:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        self.full_text += delta
        return self._advance(final=False)

    def finish(self) -> Release:
        """The answer is complete: hand out its last sentence and flush what may go."""
        if self._finished:
            return Release("", self.blocked)
        self._finished = True
        return self._advance(final=True)

    def judged(self, sentence: Sentence, learned: list[Verdict]) -> Release:
        """The classifier's verdicts on one handed-out sentence; may block, or release held text."""
        if self._apply_verdicts(sentence, learned) is not None:
            return Release("", self.blocked)
        if self.release == "judged":
            return self._release_to(self._limit(self._finished), final=self._finished)
        return Release("")

    def _apply_verdicts(self, sentence: Sentence, learned: list[Verdict]) -> Verdict | None:
        if sentence in self._outstanding:
            self._outstanding.remove(sentence)
        if self.blocked is not None:
            return self.blocked
        verdicts = _soften_refusal(sentence.text, [v for v in learned if v.classifier == EMBEDDING])
        self.flags += [v for v in verdicts if v.action == FLAG]
        blocks = [v for v in verdicts if v.action == BLOCK]
        if blocks:
            self.blocked = max(blocks, key=lambda v: v.score)
        return self.blocked

    def judge_text(self, sentence: Sentence) -> str:
        """What the classifier reads for ``sentence``: the end of the question, then the sentence."""
        room = min(_QUESTION_CHARS, CHUNK_CHARS - len(sentence.text) - 1)
        if not self.question or room < _QUESTION_MIN_CHARS:
            return sentence.text
        return f"{self.question[-room:]}\n{sentence.text}"

    def record_verdicts(self) -> list[Verdict]:
        """The whole answer's verdicts for the record, with no second classifier pass: the rules over the
        whole text (exact and cheap) and what the classifier said of its sentences as they were judged
        (the flags and the block), the worst per category first."""
        # As for a release's window: an answer no rule in force could match is not read (most answers).
        full = self.full_text
        rules = self._rules.check(full, source="model") if self._rules_every(full) else []
        learned = [v for v in [*self.flags, *([self.blocked] if self.blocked else [])] if v.classifier == EMBEDDING]
        worst: dict[str, Verdict] = {}
        for v in worst_first([*rules, *learned]):
            worst.setdefault(v.category, v)
        return list(worst.values())

    # --- internals -----------------------------------------------------------------------------

    def _advance(self, *, final: bool) -> Release:
        if self.blocked is not None:
            return Release("", self.blocked)
        to_judge = self._take_sentences(final) if self.judging else []
        if self.judge_inline and to_judge:
            scored = self.guard.learned_many([self.judge_text(s) for s in to_judge], source="model")
            for s, learned in zip(to_judge, scored, strict=True):
                self._outstanding.append(s)
                if self._apply_verdicts(s, learned) is not None:
                    return Release("", self.blocked)
            to_judge = []
        else:
            self._outstanding += to_judge
        rel = self._release_to(self._limit(final), final=final)
        rel.to_judge = to_judge
        return rel

    def _limit(self, final: bool) -> int:
        p = len(self.full_text) if final else self._safe_cut()
        if self.judging and self.release == "judged":
            p = min(p, self.judged_to)
        return p

    def _take_sentences(self, final: bool) -> list[Sentence]:
        """Hand out every finished sentence after ``_queued_to`` (all of the rest when final)."""
        text, at = self.full_text, self._queued_to
        end = at
        for m in _BOUNDARY.finditer(text, at):
            end = m.end()
        if final:
            end = len(text)
        elif end == at and len(text) - at >= _JUDGE_EVERY_CHARS:
            end = text.rfind(" ", at, len(text)) + 1 or at
        if end <= at:
            return []
        self._queued_to = end
        out, start = [], at
        for m in _BOUNDARY.finditer(text, at, end):
            out.append(Sentence(start, m.end(), text[start : m.end()]))
            start = m.end()
        if start < end:
            out.append(Sentence(start, end, text[start:end]))
        return [s for s in out if s.text.strip()]

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

    def _rules_every(self, text: str) -> bool:
        """Whether the rules must read ``text``: False only when none in force on answers could find anything."""
        return self._rules_every_window or could_match(text, self._rule_categories)

    def _release_to(self, p: int, *, final: bool) -> Release:
        cut = self._cut
        if p <= cut or self.blocked is not None:
            return Release("", self.blocked)
        spans = find_pii(self.full_text, cut, self._secret_hint)
        if not final:
            # The cut rules keep spans whole; this also holds back a span that touches the end of
            # the text so far (a private key still arriving, an e-mail whose domain may go on).
            n = len(self.full_text)
            for s in spans:
                if s.start < p < s.end or (s.start < p and s.end >= n):
                    p = s.start
        if p <= cut:
            return Release("")
        # Rules are exact: they judge every release, before anything leaves.
        window = self.full_text[max(0, cut - _CONTEXT_CHARS) : p]
        if self._rules_every(window):
            verdicts = self._rules.check(window, source="model")
            self.flags += [v for v in verdicts if v.action == FLAG]
            blocks = [v for v in verdicts if v.action == BLOCK]
            if blocks:
                self.blocked = max(blocks, key=lambda v: v.score)
                return Release("", self.blocked)
        ready = [s for s in spans if s.end <= p]
        text = apply(self.full_text[cut:p], ready, offset=cut)
        self._cut = p
        self.released_text += text
        self.redactions += ready
        return Release(text, None, ready)


def _soften_refusal(text: str, verdicts: list[Verdict]) -> list[Verdict]:
    if not _REFUSAL.search(text):
        return verdicts
    return [
        replace(v, action=FLAG, detail="refusal") if v.classifier == EMBEDDING and v.action == BLOCK else v
        for v in verdicts
    ]
