"""The safety classifier behind a ``PassBatcher``: one classifier pass for every caller waiting.

The batcher's unit is the piece the model reads (a chunk of at most ``CHUNK_CHARS``), not the caller's
text: a pass is bounded in model work, and a long text is split over passes beside everyone else's."""

from __future__ import annotations

from switchyard.libs.embeddings.batcher import PassBatcher
from switchyard.libs.safety.classifier import MAX_CHUNKS, EmbeddingClassifier, split_texts
from switchyard.libs.safety.screen import Screen, stitch

Scores = dict[str, float]


class ScoreBatcher(PassBatcher[list[float]]):
    """``classifier.score_many`` shared by all the streams (safety_out) or requests (safety_in) of a replica.

    ``max_chunks`` is each text's window: the classifier reads at most that many chunks of it (start and end)."""

    def __init__(
        self,
        classifier: EmbeddingClassifier,
        max_texts: int = 64,
        *,
        nice: int = 0,
        threads: int = 0,
        max_chunks: int = MAX_CHUNKS,
    ):
        super().__init__(classifier.score_pieces, name="classifier", max_texts=max_texts, nice=nice, threads=threads)
        self.classifier = classifier
        self.max_chunks = max_chunks

    async def score_many(self, texts: list[str], *, screen: Screen | None = None) -> list[Scores]:
        """Each text's scores; with a ``screen``, only the chunks it cannot clear wait for a classifier
        pass (it runs here, on the caller's thread: microseconds a chunk), the rest score as benign."""
        pieces, owner = split_texts(texts, self.max_chunks)
        if screen is None or not pieces:
            return self.classifier.combine(len(texts), owner, await self.run_many(pieces))
        escalated = screen.escalate(pieces)
        judged = await self.run_many([p for p, e in zip(pieces, escalated, strict=True) if e])
        return self.classifier.combine(len(texts), owner, stitch(escalated, judged, self.classifier.cleared_row))
