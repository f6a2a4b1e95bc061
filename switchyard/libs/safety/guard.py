"""Input safety: rules plus the embedding classifier, mapped to actions by the tenant policy."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from switchyard.libs.safety.calibration import CALIBRATION_PATH, read_calibration, shipped_calibration
from switchyard.libs.safety.classifier import WEIGHTS_PATH, EmbeddingClassifier
from switchyard.libs.safety.policy import SOURCES, SafetyPolicy
from switchyard.libs.safety.rules import RULES_VERSION, normalize, rule_hits
from switchyard.libs.safety.taxonomy import ALLOW, BENIGN, BLOCK, EMBEDDING, FLAG, RULES, SECRETS, Verdict, worst_first
from switchyard.libs.safety.technical import technical

if TYPE_CHECKING:
    from switchyard.libs.safety.batcher import ScoreBatcher

_shared_lock = threading.Lock()
_shared: dict[str, EmbeddingClassifier] = {}


def shared_classifier() -> EmbeddingClassifier:
    """One classifier (and so one embedding model) per process, however many guards exist."""
    with _shared_lock:
        clf = _shared.get("default")
        if clf is None:
            clf = _shared["default"] = EmbeddingClassifier(WEIGHTS_PATH)
        return clf


def calibrated_guard(calibration: Path | None = None, *, use_embeddings: bool = True) -> InputGuard:
    """A guard judging by the bars of ``calibration`` (the shipped file when None).

    Bars mean something only for the classifier they were chosen for: a mismatch is refused here, at a
    service's start, rather than judged by chance (rerun ``python -m training.safety.eval --calibrate``)."""
    cal = read_calibration(calibration) if calibration else shipped_calibration()
    guard = InputGuard(SafetyPolicy.calibrated(cal), use_embeddings=use_embeddings)
    if use_embeddings and cal.classifier != guard.classifier.version:
        raise ValueError(
            f"{calibration or CALIBRATION_PATH}: bars calibrated for {cal.classifier}, "
            f"but the classifier is {guard.classifier.version}"
        )
    return guard


class InputGuard:
    """Classify a piece of text and decide allow / flag / block per category.

    ``use_embeddings=False`` gives a rules-only guard: no model load, microseconds per call.
    With embeddings, the model loads on the first ``check`` (or ``warmup()``), a few seconds.
    """

    def __init__(
        self,
        policy: SafetyPolicy | None = None,
        *,
        use_embeddings: bool = True,
        classifier: EmbeddingClassifier | None = None,
    ) -> None:
        self.policy = policy or SafetyPolicy()
        self.use_embeddings = use_embeddings
        self._classifier = classifier

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
        out, todo = self._start(texts, source)
        todo = todo[:max_scored]
        scores = await batcher.score_many([normalize(texts[i]) for i in todo]) if todo else []
        return self._with_scores(texts, out, todo, scores, source)

    def learned_many(self, texts: list[str], *, source: str = "user") -> list[list[Verdict]]:
        """The classifier's verdicts alone (no rules): for text that is not itself shown, such as an
        answer sentence judged after the question it answers."""
        return self._learned(self.classifier.score_many([normalize(t) for t in texts]), source)

    async def learned_many_batched(
        self, texts: list[str], batcher: ScoreBatcher, *, source: str = "user"
    ) -> list[list[Verdict]]:
        """``learned_many`` whose classifier pass is shared with every other caller of ``batcher``."""
        return self._learned(await batcher.score_many([normalize(t) for t in texts]), source)

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
        todo = [i for i, t in enumerate(texts) if t.strip()] if self.use_embeddings else []
        return out, todo

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
