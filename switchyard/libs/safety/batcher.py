"""The safety classifier behind a ``PassBatcher``: one classifier pass for every caller waiting.

The batcher's unit is the piece the model reads (a chunk of at most ``CHUNK_CHARS``), not the caller's
text: a pass is bounded in model work, and a long text is split over passes beside everyone else's. Each
piece carries the screen that may clear it (``screen.py``; None for a request's, or an answer of a tenant
that flags lower), so one pass mixes pieces that may exit early and pieces that may not."""

from __future__ import annotations

from switchyard.libs.embeddings.batcher import PassBatcher
from switchyard.libs.safety.classifier import MAX_CHUNKS, EmbeddingClassifier, split_texts
from switchyard.libs.safety.screen import Screen

Scores = dict[str, float]
Piece = tuple[str, Screen | None]


class ScoreBatcher(PassBatcher[Piece, list[float]]):
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
        super().__init__(self._score, name="classifier", max_texts=max_texts, nice=nice, threads=threads)
        self.classifier = classifier
        self.max_chunks = max_chunks

    def _score(self, pieces: list[Piece]) -> list[list[float]]:
        # One screen per pass: a piece carrying another (never the case in a service) is read whole.
        screen = next((s for _, s in pieces if s is not None), None)
        return self.classifier.score_pieces(
            [p for p, _ in pieces], screen=screen, screened=[s is not None and s is screen for _, s in pieces]
        )

    async def score_many(self, texts: list[str], *, screen: Screen | None = None) -> list[Scores]:
        """Each text's scores; with a ``screen``, its pieces may exit MiniLM early where the screen clears
        them (scored benign); every other piece gets MiniLM's whole pass."""
        pieces, owner = split_texts(texts, self.max_chunks)
        rows = await self.run_many([(p, screen) for p in pieces])
        return self.classifier.combine(len(texts), owner, rows)
