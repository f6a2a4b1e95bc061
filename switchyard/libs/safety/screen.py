"""The output check's early exit: a small head on MiniLM's own layer-``k`` states clears plainly benign chunks.

The learned classifier (``classifier.py``, a LoRA-tuned MiniLM) reads every answer sentence, and is the
largest per-token CPU cost of the layer. Most answer sentences are plainly benign, so a pass runs the
adapted MiniLM's first ``exit_layer`` layers on every chunk, and this head reads the pooled states there
(the token embeddings' pool and layer ``exit_layer``'s, each mean-pooled and L2-normalised, side by side).
A chunk it clears scores benign; every other chunk goes on from its layer-``exit_layer`` states through the
rest of MiniLM (nothing is computed twice) and gets exactly MiniLM's scores, whose calibrated bars decide
every flag and block (``Embedder.embed_layers_split``, ``EmbeddingClassifier.score_pieces``).

The head is distilled: trained on MiniLM's own answer-side harm score of the training texts
(``python -m training.safety.screen``), and its bar (``clear_below``) is chosen on held-out text so that
(nearly) no chunk MiniLM would flag on an answer is cleared. The guarantee is relative to the answer bars
the head was fitted for (``bar``): a policy whose answer flag bar for some category is lower is never
screened (``InputGuard.screens``). Weights: ``data/screen.npz``; the design and its figures: docs/safety.md.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

SCREEN_PATH = Path(__file__).resolve().parent / "data" / "screen.npz"


class Screen:
    """``escalate(pooled)``: which chunks must go on through MiniLM; the rest are plainly benign."""

    def __init__(
        self,
        weights: list[np.ndarray],
        *,
        exit_layer: int,
        clear_below: float = 0.0,
        bar: float = 0.5,
        classifier_version: str = "",
        version: str = "",
    ) -> None:
        # [W0, b0, W1, b1, ...]: affine layers with a ReLU between them, one logit out.
        self.weights = [np.asarray(w, dtype=np.float32) for w in weights]
        # The head reads the pooled states of layers 0 and ``exit_layer``.
        self.exit_layer = exit_layer
        # A chunk scoring below this is cleared (chosen on held-out text; docs/safety.md).
        self.clear_below = clear_below
        # The answer flag bar the head was distilled for: clearing means "MiniLM would score it below this".
        self.bar = bar
        self.classifier_version = classifier_version
        self.version = version
        # Chunks screened and escalated since the start (the eval and the stage record report the share).
        self.screened = 0
        self.escalated = 0
        self._lock = threading.Lock()
        self._torch_weights: list[Any] | None = None

    @classmethod
    def load(cls, path: Path = SCREEN_PATH) -> Screen:
        with np.load(path, allow_pickle=False) as z:
            n = sum(1 for k in z.files if k.startswith("w") and k[1:].isdigit())
            return cls(
                [z[f"w{i}"] for i in range(n)],
                exit_layer=int(z["exit_layer"]),
                clear_below=float(z["clear_below"]),
                bar=float(z["bar"]),
                classifier_version=str(z["classifier"]),
                version=str(z["version"]),
            )

    @property
    def layers(self) -> tuple[int, int]:
        """The hidden states the head reads, pooled: the token embeddings and the exit layer's output."""
        return (0, self.exit_layer)

    def logits(self, pooled: np.ndarray) -> np.ndarray:
        """One logit per row of ``pooled`` (``(n, 2 * dim)``, the blocks of ``layers``): at or above
        ``clear_below``, MiniLM must read the chunk."""
        # In torch, on the pass's own thread and torch threads: numpy's BLAS beside a busy torch thread took
        # milliseconds a call for microseconds of work (its own thread pool contending for the cores).
        import torch

        if self._torch_weights is None:
            self._torch_weights = [torch.from_numpy(np.ascontiguousarray(w)) for w in self.weights]
        h = torch.from_numpy(np.ascontiguousarray(pooled, dtype=np.float32))
        pairs = list(zip(self._torch_weights[::2], self._torch_weights[1::2], strict=True))
        with torch.inference_mode():
            for i, (w, b) in enumerate(pairs):
                h = torch.addmm(b, h, w.reshape(len(w), -1))
                if i < len(pairs) - 1:
                    h = torch.relu(h)
        out: np.ndarray = h.numpy()[:, 0]
        return out

    @property
    def escalated_share(self) -> float | None:
        return self.escalated / self.screened if self.screened else None

    def escalate(self, pooled: np.ndarray) -> np.ndarray:
        """Boolean per row: ``True`` where the chunk must go on through MiniLM."""
        out: np.ndarray = self.logits(pooled) >= self.clear_below
        with self._lock:
            self.screened += len(out)
            self.escalated += int(out.sum())
        return out
