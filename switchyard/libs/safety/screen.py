"""The output check's first stage: a hashed token n-gram linear model that clears plainly benign chunks.

The learned classifier (``classifier.py``, a LoRA-tuned MiniLM) reads every answer sentence, and was the
largest per-token CPU cost of the layer. Most answer sentences are plainly benign, so a linear model over
MiniLM's own word pieces and their neighbour pairs scores every chunk first (numpy, microseconds per
chunk); only a chunk it cannot clear goes on to MiniLM, whose calibrated bars still decide every flag and
block. The model is distilled: trained on MiniLM's own answer-side harm score of the training texts
(``python -m training.safety.screen``), and its bar (``clear_below``) is chosen on a held-out split so
that (nearly) no chunk MiniLM would flag on an answer is cleared. A cleared chunk scores as benign.

The guarantee is relative to the answer bars the screen was fitted for (``bar``): a policy whose answer
flag bar for some category is lower is never screened (``InputGuard.screens``). Weights:
``data/screen.npz``; the design and its figures: docs/safety.md.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

SCREEN_PATH = Path(__file__).resolve().parent / "data" / "screen.npz"
# Word pieces the screen reads per chunk (MiniLM reads 256; a chunk is at most CHUNK_CHARS characters).
MAX_PIECES = 320
_PAIR_MULT = np.int64(1_000_003)
R = TypeVar("R")


def feature_indices(ids: np.ndarray, vocab: int, buckets: int) -> np.ndarray:
    """The features of one chunk's word-piece ids: each piece, and each neighbour pair hashed into
    ``buckets`` slots after the ``vocab`` unigram slots."""
    ids = ids.astype(np.int64)
    pairs = vocab + (ids[:-1] * _PAIR_MULT + ids[1:]) % buckets
    return np.concatenate([ids, pairs])


class Screen:
    """``escalate(texts)``: which chunks the classifier must read; the rest are plainly benign."""

    def __init__(
        self,
        weights: np.ndarray,
        bias: float,
        *,
        vocab: int,
        buckets: int,
        clear_below: float = 0.0,
        bar: float = 0.5,
        classifier_version: str = "",
        version: str = "",
    ) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self.bias = bias
        self.vocab = vocab
        self.buckets = buckets
        # A chunk scoring below this is cleared (chosen on held-out text; docs/safety.md).
        self.clear_below = clear_below
        # The answer flag bar the screen was distilled for: clearing means "MiniLM would score it below this".
        self.bar = bar
        self.classifier_version = classifier_version
        self.version = version
        # Chunks screened and escalated since the start (the eval and the stage record report the share).
        self.screened = 0
        self.escalated = 0
        self._tok: Any = None
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path = SCREEN_PATH) -> Screen:
        with np.load(path, allow_pickle=False) as z:
            return cls(
                z["weights"],
                float(z["bias"]),
                vocab=int(z["vocab"]),
                buckets=int(z["buckets"]),
                clear_below=float(z["clear_below"]),
                bar=float(z["bar"]),
                classifier_version=str(z["classifier"]),
                version=str(z["version"]),
            )

    @property
    def tokenizer(self) -> Any:
        if self._tok is None:
            with self._lock:
                if self._tok is None:
                    from tokenizers import Tokenizer

                    from switchyard.libs.embeddings import model_dir

                    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
                    tok.no_padding()
                    tok.enable_truncation(max_length=MAX_PIECES)
                    self._tok = tok
        return self._tok

    def piece_ids(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's MiniLM word-piece ids, without [CLS] and [SEP]."""
        return [np.asarray(e.ids[1:-1], dtype=np.int64) for e in self.tokenizer.encode_batch(texts)]

    def scores(self, texts: list[str]) -> np.ndarray:
        """One logit per text: above ``clear_below``, MiniLM must read it."""
        out = np.full(len(texts), self.bias, dtype=np.float32)
        if not texts:
            return out
        feats = [feature_indices(ids, self.vocab, self.buckets) for ids in self.piece_ids(texts)]
        lengths = np.array([len(f) for f in feats])
        flat = np.concatenate(feats) if lengths.sum() else np.zeros(0, dtype=np.int64)
        sums = np.zeros(len(texts), dtype=np.float32)
        np.add.at(sums, np.repeat(np.arange(len(texts)), lengths), self.weights[flat])
        out += sums / np.sqrt(np.maximum(lengths, 1))
        return out

    @property
    def escalated_share(self) -> float | None:
        return self.escalated / self.screened if self.screened else None

    def escalate(self, texts: list[str]) -> np.ndarray:
        """Boolean per text: ``True`` where the classifier must judge it."""
        out: np.ndarray = self.scores(texts) >= self.clear_below
        self.screened += len(texts)
        self.escalated += int(out.sum())
        return out


def stitch(escalated: np.ndarray, judged: list[R], cleared: R) -> list[R]:
    """One row per chunk: the classifier's row (``judged``, in order) where it was escalated, else ``cleared``."""
    rows = iter(judged)
    return [next(rows) if e else cleared for e in escalated]
