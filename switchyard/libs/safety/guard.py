"""Input safety: rules plus the embedding classifier, mapped to actions by the tenant policy."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from switchyard.libs.safety.calibration import CALIBRATION_PATH, read_calibration, shipped_calibration
from switchyard.libs.safety.classifier import WEIGHTS_PATH, EmbeddingClassifier, split_texts
from switchyard.libs.safety.policy import SOURCES, SafetyPolicy
from switchyard.libs.safety.rules import RULES_VERSION, normalize, rule_hits
from switchyard.libs.safety.screen import SCREEN_PATH, Screen
from switchyard.libs.safety.taxonomy import ALLOW, BENIGN, BLOCK, EMBEDDING, FLAG, RULES, SECRETS, Verdict, worst_first
from switchyard.libs.safety.technical import technical

if TYPE_CHECKING:
    from switchyard.libs.safety.batcher import ScoreBatcher

_shared_lock = threading.Lock()
_shared: dict[str, EmbeddingClassifier] = {}


def shared_classifier(dtype: str = "auto") -> EmbeddingClassifier:
    """One classifier (and so one embedding model) per process and ``dtype``, however many guards exist."""
    with _shared_lock:
        clf = _shared.get(dtype)
        if clf is None:
            clf = _shared[dtype] = EmbeddingClassifier(WEIGHTS_PATH, dtype=dtype)
        return clf


def shared_screen() -> Screen:
    """The shipped early exit of the answer check (``screen.py``), loaded once per process."""
    with _shared_lock:
        screen = _shared_screen.get("default")
        if screen is None:
            screen = _shared_screen["default"] = Screen.load(SCREEN_PATH)
        return screen


_shared_screen: dict[str, Screen] = {}


def screen_for(classifier: EmbeddingClassifier) -> Screen:
    """The shipped screen, refused unless it was distilled from ``classifier``: it clears what that
    classifier would let through, and nothing is known of another (rerun ``python -m training.safety.screen``)."""
    screen = shared_screen()
    if screen.classifier_version != classifier.version:
        raise ValueError(
            f"{SCREEN_PATH}: the screen was distilled from {screen.classifier_version}, "
            f"but the classifier is {classifier.version}"
        )
    return screen


def calibrated_guard(
    calibration: Path | None = None, *, use_embeddings: bool = True, screen: bool = False, dtype: str = "auto"
) -> InputGuard:
    """A guard judging by the bars of ``calibration`` (the shipped file when None) with the classifier in
    ``dtype``; with ``screen``, the answers' chunks may exit the classifier early (``screen.py``).

    Bars mean something only for the classifier they were chosen for: a mismatch is refused here, at a
    service's start, rather than judged by chance (rerun ``python -m training.safety.eval --calibrate``)."""
    cal = read_calibration(calibration) if calibration else shipped_calibration()
    classifier = shared_classifier(dtype) if use_embeddings else None
    guard = InputGuard(SafetyPolicy.calibrated(cal), use_embeddings=use_embeddings, classifier=classifier)
    if use_embeddings and cal.classifier != guard.classifier.version:
        raise ValueError(
            f"{calibration or CALIBRATION_PATH}: bars calibrated for {cal.classifier}, "
            f"but the classifier is {guard.classifier.version}"
        )
    if use_embeddings and screen:
        guard.screen = screen_for(guard.classifier)
    return guard


class InputGuard:
    """Classify a piece of text and decide allow / flag / block per category.

    ``use_embeddings=False`` gives a rules-only guard: no model load, microseconds per call.
    With embeddings, the model loads on the first ``check`` (or ``warmup()``), a few seconds.
    With a ``screen``, the chunks of the model's answers that it clears after the classifier's first layers
    score benign, the rest get the whole classifier (``screens``); requests are always read whole.
    """

    def __init__(
        self,
        policy: SafetyPolicy | None = None,
        *,
        use_embeddings: bool = True,
        classifier: EmbeddingClassifier | None = None,
        screen: Screen | None = None,
    ) -> None:
        self.policy = policy or SafetyPolicy()
        self.use_embeddings = use_embeddings
        self._classifier = classifier
        self.screen = screen

    @property
    def classifier(self) -> EmbeddingClassifier:
        if self._classifier is None:
            self._classifier = shared_classifier()
        return self._classifier

    def warmup(self) -> None:
        """Load the embedding model now (service start-up) rather than on the first request."""
        if self.use_embeddings:
            self.classifier.score("warm up")

    @property
    def version(self) -> str:
        if not self.use_embeddings:
            return RULES_VERSION
        return f"{RULES_VERSION}+{self.classifier.version}"

    def check(self, text: str, *, source: str = "user") -> list[Verdict]:
        """Verdicts that call for action (flag or block), worst first; empty means allow."""
        return self.check_many([text], source=source)[0]

    def check_many(self, texts: list[str], *, source: str = "user") -> list[list[Verdict]]:
        """``check`` for several texts at once: one batched pass through the embedding model."""
        out, todo = self._start(texts, source)
        if todo:
            return self._with_scores(
                texts, out, todo, self.classifier.score_many([normalize(texts[i]) for i in todo]), source
            )
        return self._with_scores(texts, out, todo, [], source)

    async def check_many_batched(
        self, texts: list[str], batcher: ScoreBatcher, *, source: str = "user", max_scored: int | None = None
    ) -> list[list[Verdict]]:
        """``check_many`` whose classifier pass is shared with every other caller of ``batcher``.

        The rules read every text; the classifier only the first ``max_scored`` (all when None)."""
        scored = self.scored_texts(texts, max_scored)
        scores = await batcher.score_many(scored) if scored else []
        return self.check_many_scored(texts, scores, source=source, max_scored=max_scored)

    def scored_texts(self, texts: list[str], max_scored: int | None = None) -> list[str]:
        """What the classifier reads of ``texts`` (the first ``max_scored`` that are not blank), normalized:
        the same for every guard on one classifier, whatever its policy, so one pass serves any of them."""
        return [normalize(texts[i]) for i in self._scored(texts)[:max_scored]]

    def check_many_scored(
        self, texts: list[str], scores: list[dict[str, float]], *, source: str = "user", max_scored: int | None = None
    ) -> list[list[Verdict]]:
        """``check_many_batched`` with the classifier's scores of ``scored_texts(texts, max_scored)`` at hand."""
        out, todo = self._start(texts, source)
        return self._with_scores(texts, out, todo[:max_scored], scores, source)

    def screens(self, source: str) -> Screen | None:
        """The screen that may clear chunks of text from ``source`` part way through the classifier:
        only answers, and only while every answer flag bar in force is at least the one the screen was
        distilled for (a tenant that flags lower is judged by the classifier alone)."""
        s = self.screen
        if s is None or source != "model" or not self.use_embeddings:
            return None
        bars = [self.policy.threshold(c, "model").flag_at for c in self.policy.output_categories]
        return s if all(b >= s.bar for b in bars) else None

    def learned_many(self, texts: list[str], *, source: str = "user") -> list[list[Verdict]]:
        """The classifier's verdicts alone (no rules): for text that is not itself shown, such as an
        answer sentence judged after the question it answers."""
        clf = self.classifier
        screen = self.screens(source)
        if screen is None:
            return self._learned(clf.score_many([normalize(t) for t in texts]), source)
        pieces, owner = split_texts([normalize(t) for t in texts])
        return self._learned(clf.combine(len(texts), owner, clf.score_pieces(pieces, screen=screen)), source)

    async def learned_many_batched(
        self, texts: list[str], batcher: ScoreBatcher, *, source: str = "user"
    ) -> list[list[Verdict]]:
        """``learned_many`` whose classifier pass is shared with every other caller of ``batcher``."""
        return self._learned(
            await batcher.score_many([normalize(t) for t in texts], screen=self.screens(source)), source
        )

    def _learned(self, scores: list[dict[str, float]], source: str) -> list[list[Verdict]]:
        _check_source(source)
        return [worst_first(self._model_verdicts(sc, source, set())) for sc in scores]

    def for_technical(self, verdicts: list[Verdict]) -> list[Verdict]:
        """The verdicts on a message that carries code, shell, logs or configuration, or runs code with
        the code tool: the classifier's blocks in ``policy.technical_flag_only`` become flags."""
        soft = self.policy.technical_flag_only
        return worst_first(
            replace(v, action=FLAG, detail="technical")
            if v.classifier == EMBEDDING and v.category in soft and v.action == BLOCK
            else v
            for v in verdicts
        )

    def _start(self, texts: list[str], source: str) -> tuple[list[list[Verdict]], list[int]]:
        _check_source(source)
        out: list[list[Verdict]] = [self._rule_verdicts(t, source) for t in texts]
        return out, self._scored(texts)

    def _scored(self, texts: list[str]) -> list[int]:
        return [i for i, t in enumerate(texts) if t.strip()] if self.use_embeddings else []

    def _with_scores(
        self, texts: list[str], out: list[list[Verdict]], todo: list[int], scores: list[dict[str, float]], source: str
    ) -> list[list[Verdict]]:
        for i, sc in zip(todo, scores, strict=True):
            out[i] += self._model_verdicts(sc, source, {v.category for v in out[i]})
            if source == "user" and technical(texts[i]):
                out[i] = self.for_technical(out[i])
        return [worst_first(vs) for vs in out]

    def _rule_verdicts(self, text: str, source: str) -> list[Verdict]:
        out = []
        for hit in rule_hits(text, secrets=self.policy.applies(SECRETS, source)):
            action = self.policy.action(hit.category, hit.score, source, learned=False)
            if action != ALLOW:
                out.append(Verdict(hit.category, hit.score, action, RULES, RULES_VERSION, hit.detail))
        return out

    def _model_verdicts(self, scores: dict[str, float], source: str, seen: set[str]) -> list[Verdict]:
        out = []
        clf = self.classifier
        for cat, score in scores.items():
            if cat == BENIGN or cat in seen:
                continue  # a rule already gave an exact answer for this category
            action = self.policy.action(cat, score, source)
            if action != ALLOW:
                bar = self.policy.threshold(cat, source).block_at
                # Between the flag and the block bar: worth a look, not a refusal (docs/safety.md).
                detail = "borderline" if action == FLAG and bar is not None and score < bar else ""
                out.append(Verdict(cat, round(score, 4), action, EMBEDDING, clf.version, detail, bar))
        return out


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
