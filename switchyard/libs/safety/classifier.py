"""Learned classifier: a linear head over MiniLM features, with the encoder fine-tuned (LoRA).

The features are the mean-pooled, L2-normalised hidden states of MiniLM layers 4 and 6 side
by side (768 numbers; layer 6 alone is the ordinary sentence embedding). The middle layer keeps
more of the wording ("without getting caught", "so she can't resist") than the output layer,
which was trained to encode topic; one forward pass gives both. The weights are a few tens of
kilobytes of numpy (``data/classifier.npz``, written by ``python -m training.safety.train``).

The weight file also carries low-rank adapters for MiniLM (``lora_A:*`` /
``lora_B:*``, trained by ``training/safety/lora.py``) together with the head, so the encoder
separates intent rather than topic. The classifier then loads its own MiniLM instance with the
adapters merged into the weights (``adapter_deltas``; one ordinary forward pass per batch); the
shared ``get_embedder()`` that retrieval uses stays unadapted. Weight files without adapters use
the shared embedder.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from switchyard.libs.safety.taxonomy import BENIGN

if TYPE_CHECKING:
    from switchyard.libs.embeddings import Embedder
    from switchyard.libs.safety.screen import Screen

WEIGHTS_PATH = Path(__file__).resolve().parent / "data" / "classifier.npz"
# About 200 tokens of English: under the embedder's 256-token window, so nothing is truncated away.
CHUNK_CHARS = 900
# Long files are sampled at the start and the end (where injected instructions usually sit)
# rather than embedded whole: a 1 MB upload must not cost seconds of CPU.
MAX_CHUNKS = 24

_SPLIT = re.compile(r"(?<=[.!?\n])\s+")


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


# A harm class holding at least this share of a text's harm probability (1 - P(benign)) is named
# along with the most likely one: the classes overlap (a mugging is violent and a theft, a hitman
# hired online is violence and a crime for money), and the right one is often a close second.
# Chosen on the pooled development splits (0.3 in the fifth model round, 0.2 since the sixth;
# docs/safety.md): it cannot add a false positive, since a benign text is flagged under some class
# only when its most likely harm class already is, and it never changes whether a text is flagged
# or blocked (a named class gets the top class's score); it only names more categories.
SECONDARY_SHARE = 0.2


def harm_scores(p: np.ndarray, benign_index: int, secondary_share: float = SECONDARY_SHARE) -> np.ndarray:
    """Copy of ``p`` where each row's most likely harm class, and every harm class holding at least
    ``secondary_share`` of the row's harm probability, scores ``1 - P(benign)``."""
    p = p.copy()
    harm = p.copy()
    harm[:, benign_index] = -1.0
    top = harm.argmax(axis=1)
    total = 1.0 - p[:, benign_index]
    named = harm >= secondary_share * total[:, None]
    named[np.arange(len(p)), top] = True
    named[:, benign_index] = False
    p[named] = np.broadcast_to(total[:, None], p.shape)[named]
    return p


def adapter_deltas(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Weight updates ``{"<module>.weight": B @ A}`` from a weight file's ``lora_A:<module>`` and
    ``lora_B:<module>`` arrays (``B`` stored with the adapter's scale folded in)."""
    out: dict[str, np.ndarray] = {}
    for key, a in arrays.items():
        if key.startswith("lora_A:"):
            name = key[len("lora_A:") :]
            b = arrays[f"lora_B:{name}"].astype(np.float32)
            out[f"{name}.weight"] = b @ a.astype(np.float32)
    return out


def chunk_text(text: str, size: int = CHUNK_CHARS, max_chunks: int = MAX_CHUNKS) -> list[str]:
    """Split at sentence boundaries into pieces of at most ``size`` characters (hard-cut if needed)."""
    text = text.strip()
    if len(text) <= size:
        return [text]
    reach = max_chunks * size
    if len(text) > 2 * reach:
        # Only the start and the end are kept below: split no more than could be kept, so the work
        # stays bounded however long the text.
        text = f"{text[:reach]}\n{text[-reach:]}"
    chunks: list[str] = []
    cur = ""
    for sent in _SPLIT.split(text):
        while len(sent) > size:
            if cur:
                chunks.append(cur)
                cur = ""
            chunks.append(sent[:size])
            sent = sent[size:]
        if cur and len(cur) + 1 + len(sent) > size:
            chunks.append(cur)
            cur = sent
        else:
            cur = f"{cur} {sent}" if cur else sent
    if cur:
        chunks.append(cur)
    if len(chunks) > max_chunks:
        half = max_chunks // 2
        chunks = chunks[:half] + chunks[-(max_chunks - half) :]
    return chunks


def split_texts(texts: list[str], max_chunks: int = MAX_CHUNKS) -> tuple[list[str], list[int]]:
    """The pieces the classifier scores for `texts` (each text's window: at most `max_chunks` chunks, from
    its start and its end), and for each piece the index of its text."""
    pieces: list[str] = []
    owner: list[int] = []
    for i, t in enumerate(texts):
        for c in chunk_text(t, max_chunks=max_chunks) if t.strip() else []:
            pieces.append(c)
            owner.append(i)
    return pieces, owner


class EmbeddingClassifier:
    """Scores text against every learned category; probabilities sum to one with ``benign``."""

    def __init__(self, weights: Path = WEIGHTS_PATH, embedder: Embedder | None = None, *, dtype: str = "auto") -> None:
        """``dtype``: what the adapted MiniLM runs in (``Embedder``'s; "auto" picks per CPU)."""
        with np.load(weights, allow_pickle=False) as z:
            self.W = z["W"].astype(np.float32)  # (classes, dim)
            self.b = z["b"].astype(np.float32)
            self.classes: tuple[str, ...] = tuple(str(c) for c in z["classes"])
            self.version = str(z["version"])
            # Older weight files predate the layer choice: they read the output layer only.
            self.layers: tuple[int, ...] = tuple(int(k) for k in z["layers"]) if "layers" in z.files else ()
            self.adapters = {k: z[k] for k in z.files if k.startswith(("lora_A:", "lora_B:"))}
        self._embedder = embedder
        self.dtype = dtype
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    from switchyard.libs.embeddings import Embedder, get_embedder

                    if self.adapters:
                        # Its own instance: the adapters must not leak into retrieval embeddings.
                        self._embedder = Embedder(weight_deltas=adapter_deltas(self.adapters), dtype=self.dtype)
                    else:
                        self._embedder = get_embedder()
        return self._embedder

    def features(self, texts: list[str]) -> np.ndarray:
        """The ``(n, dim)`` inputs of the linear layer for ``texts`` (one MiniLM pass)."""
        if self.layers:
            return self.embedder.embed_layers(texts, self.layers)
        return self.embedder.embed(texts)

    def proba(self, embeddings: np.ndarray) -> np.ndarray:
        """``(n, classes)`` softmax probabilities for precomputed features (see ``features``)."""
        return softmax(embeddings @ self.W.T + self.b)

    def category_scores(self, embeddings: np.ndarray) -> np.ndarray:
        """Like ``proba``, but the most likely harm category scores ``1 - P(benign)``.

        Harm classes overlap (fraud vs. hacking, self-harm vs. dangerous dosing), so a clearly
        harmful request often splits its mass over two or three of them and no single one
        crosses a threshold. "Harmful at all" is the better-calibrated question; the argmax
        only names the category, together with any class holding ``SECONDARY_SHARE`` (20 %) or
        more of the harm probability.
        """
        return harm_scores(self.proba(embeddings), self.classes.index(BENIGN))

    def score_many(self, texts: list[str], max_chunks: int = MAX_CHUNKS) -> list[dict[str, float]]:
        """Per text, each category's probability (max over the text's chunks, at most `max_chunks` of them)."""
        pieces, owner = split_texts(texts, max_chunks)
        return self.combine(len(texts), owner, self.score_pieces(pieces))

    def score_pieces(
        self, pieces: list[str], *, screen: Screen | None = None, screened: Sequence[bool] | None = None
    ) -> list[list[float]]:
        """One row of category scores (in ``classes`` order) per piece, each piece scored as it is.

        With a ``screen``, the pieces it may judge (``screened``: all when None) exit MiniLM after its
        ``exit_layer`` where it clears them (``cleared_row``); every other piece goes on through the whole
        model, in the same pass, and gets exactly the rows it would get without a screen."""
        if not pieces:
            return []
        allowed = np.ones(len(pieces), dtype=bool) if screened is None else np.asarray(screened, dtype=bool)
        if screen is None or not allowed.any():
            return [[float(v) for v in row] for row in self.category_scores(self.features(pieces))]

        def go_on(pooled: np.ndarray, idx: list[int]) -> np.ndarray:
            out = np.ones(len(idx), dtype=bool)
            mine = allowed[idx]
            if mine.any():
                out[mine] = screen.escalate(pooled[mine])
            return out

        layers = self.layers or (self.embedder.n_layers,)
        feats, went_on = self.embedder.embed_layers_split(pieces, layers, screen.exit_layer, go_on)
        judged = iter(self.category_scores(feats[went_on]) if went_on.any() else [])
        cleared = self.cleared_row
        return [[float(v) for v in next(judged)] if g else list(cleared) for g in went_on]

    @property
    def cleared_row(self) -> list[float]:
        """The row of a chunk the screen cleared (``screen.py``): benign, no category scored."""
        return [1.0 if c == BENIGN else 0.0 for c in self.classes]

    def combine(self, n: int, owner: list[int], rows: list[list[float]]) -> list[dict[str, float]]:
        """Each of `n` texts' scores: the max over the rows of its pieces (`owner[i]` is row i's text)."""
        out: list[dict[str, float]] = [dict.fromkeys(self.classes, 0.0) for _ in range(n)]
        for row, i in zip(rows, owner, strict=True):
            d = out[i]
            for c, v in zip(self.classes, row, strict=True):
                if v > d[c]:
                    d[c] = v
        return out

    def score(self, text: str) -> dict[str, float]:
        return self.score_many([text])[0]
