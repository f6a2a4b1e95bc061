"""The safety classifier behind a ``PassBatcher``: one classifier pass for every caller waiting."""

from __future__ import annotations

from libs.embeddings.batcher import PassBatcher
from libs.safety.classifier import EmbeddingClassifier

Scores = dict[str, float]


class ScoreBatcher(PassBatcher[Scores]):
    """``classifier.score_many`` shared by all the streams (safety_out) or requests (safety_in) of a replica."""

    def __init__(self, classifier: EmbeddingClassifier, max_texts: int = 64, *, nice: int = 0, threads: int = 0):
        super().__init__(classifier.score_many, name="classifier", max_texts=max_texts, nice=nice, threads=threads)
        self.classifier = classifier

    async def score_many(self, texts: list[str]) -> list[Scores]:
        return await self.run_many(texts)
