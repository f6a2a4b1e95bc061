"""Train the embedding classifier: ``python -m libs.safety.train``.

Multinomial logistic regression (plain numpy, full-batch Adam, L2) over MiniLM features of
``data/train.jsonl`` (mean-pooled layers ``LAYERS``, see ``classifier.py``). ``--cv`` picks the L2 strength by grouped 5-fold cross-validation on the
training set only; ``data/eval.jsonl`` is never read here. Writes ``data/classifier.npz``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from libs.safety.classifier import WEIGHTS_PATH, harm_scores, softmax
from libs.safety.taxonomy import BENIGN

DATA = Path(__file__).resolve().parent / "data"
L2_GRID = (1e-5, 3e-5, 1e-4)
FOLDS = 5
BENIGN_SHARE = 0.5
DEFAULT_L2 = 3e-5
# MiniLM layers whose mean-pooled states feed the classifier; chosen by grouped cross-validation
# on the training set (layer 6 alone: mean recall 0.86, benign FPR 0.10; 4+6: 0.89, 0.07).
LAYERS = (4, 6)
BLOCK_AT = 0.5  # mirrors the default policy thresholds, for the cross-validation report
FLAG_AT = 0.45


def load(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def embed_cached(texts: list[str], model: str, embed: Callable[[list[str]], np.ndarray]) -> np.ndarray:
    """Embeddings of ``texts``; vectors of texts embedded in an earlier run are reused from a
    cache in the temp dir (re-embedding the whole set costs minutes of CPU on a small machine).
    ``model`` names what ``embed`` computes (include the layers): it keys the cache file."""
    key = hashlib.sha256(model.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"switchyard-safety-emb-{key}.npz"
    known: dict[str, np.ndarray] = {}
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            known = dict(zip((str(t) for t in z["texts"]), z["X"], strict=True))
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        known.update(zip(missing, embed(missing), strict=True))
        np.savez(path, texts=np.array(list(known)), X=np.stack(list(known.values())))
    return np.stack([known[t] for t in texts]).astype(np.float32)


def fit(
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    benign_index: int,
    l2: float,
    steps: int = 1500,
    lr: float = 0.05,
) -> tuple[np.ndarray, np.ndarray]:
    d = X.shape[1]
    Y = np.eye(n_classes, dtype=np.float32)[y]
    counts = np.maximum(np.bincount(y, minlength=n_classes), 1).astype(np.float32)
    # Benign carries half the total weight and the harm classes share the other half equally:
    # plain "balanced" weights would give benign 1/17 of the say and flag every edgy question.
    share = np.full(n_classes, (1 - BENIGN_SHARE) / (n_classes - 1), dtype=np.float32)
    share[benign_index] = BENIGN_SHARE
    sw = (share / counts)[y]
    sw /= sw.sum()
    W = np.zeros((n_classes, d), dtype=np.float32)
    b = np.zeros(n_classes, dtype=np.float32)
    mW, vW, mb, vb = (np.zeros_like(W), np.zeros_like(W), np.zeros_like(b), np.zeros_like(b))
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        G = (softmax(X @ W.T + b) - Y) * sw[:, None]
        gW = G.T @ X + l2 * W
        gb = G.sum(axis=0)
        mW = b1 * mW + (1 - b1) * gW
        vW = b2 * vW + (1 - b2) * gW * gW
        mb = b1 * mb + (1 - b1) * gb
        vb = b2 * vb + (1 - b2) * gb * gb
        c1, c2 = 1 - b1**t, 1 - b2**t
        W -= lr * (mW / c1) / (np.sqrt(vW / c2) + eps)
        b -= lr * (mb / c1) / (np.sqrt(vb / c2) + eps)
    return W, b


def report(P: np.ndarray, y: np.ndarray, classes: list[str]) -> tuple[float, float]:
    """(mean per-class recall at BLOCK_AT, benign false-positive rate at FLAG_AT)."""
    bi = classes.index(BENIGN)
    P = harm_scores(P, bi)
    harm = np.delete(P, bi, axis=1)
    benign = y == bi
    fpr = float((harm[benign].max(axis=1) >= FLAG_AT).mean())
    recalls = []
    for ci, _c in enumerate(classes):
        if ci == bi:
            continue
        rows = y == ci
        recalls.append(float((P[rows, ci] >= BLOCK_AT).mean()) if rows.any() else 0.0)
    return float(np.mean(recalls)), fpr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=WEIGHTS_PATH)
    ap.add_argument("--l2", type=float, default=DEFAULT_L2)
    ap.add_argument("--cv", action="store_true", help="pick L2 from a grid by grouped cross-validation")
    args = ap.parse_args()

    from libs.embeddings import MODEL_NAME, get_embedder

    rows = load(DATA / "train.jsonl")
    classes = sorted({r["label"] for r in rows})
    y = np.array([classes.index(r["label"]) for r in rows])
    t0 = time.time()
    layers = LAYERS

    def features(texts: list[str]) -> np.ndarray:
        return get_embedder().embed_layers(texts, layers)

    X = embed_cached([r["text"] for r in rows], f"{MODEL_NAME}@layers={layers}", features)
    print(f"embedded {len(rows)} training examples in {time.time() - t0:.1f}s; classes: {classes}")

    # Template rows sharing one objective stay in one fold, so CV does not score a goal it trained on.
    groups = np.array([zlib.crc32(r["text"].split("{")[0].encode()) for r in rows])
    for i, r in enumerate(rows):
        if r.get("source") == "template":
            groups[i] = zlib.crc32(r["text"].rstrip("?.").split(" ")[-1].encode())
    fold = groups % FOLDS

    bi = classes.index(BENIGN)
    l2 = args.l2
    if args.cv:
        best = (-1.0, L2_GRID[0])
        for cand in L2_GRID:
            P = np.zeros((len(rows), len(classes)), dtype=np.float32)
            for k in range(FOLDS):
                tr, te = fold != k, fold == k
                W, b = fit(X[tr], y[tr], len(classes), bi, cand, steps=600)
                P[te] = softmax(X[te] @ W.T + b)
            rec, fpr = report(P, y, classes)
            print(f"  cv l2={cand:g}: mean recall@{BLOCK_AT}={rec:.3f} benign FPR@{FLAG_AT}={fpr:.3f}")
            if rec - 3 * fpr > best[0]:
                best = (rec - 3 * fpr, cand)
        l2 = best[1]
    W, b = fit(X, y, len(classes), bi, l2)
    digest = hashlib.sha256(W.tobytes() + b.tobytes()).hexdigest()[:8]
    version = f"minilm-lr-l{''.join(map(str, layers))}-{dt.date.today():%Y%m%d}-{digest}"
    np.savez_compressed(
        args.out,
        W=W.astype(np.float32),
        b=b.astype(np.float32),
        classes=np.array(classes),
        version=np.array(version),
        embedding_model=np.array(MODEL_NAME),
        layers=np.array(layers, dtype=np.int64),
        l2=np.array(l2),
        n_train=np.array(len(rows)),
    )
    print(f"l2={l2:g}; wrote {args.out} ({args.out.stat().st_size} bytes), version {version}")


if __name__ == "__main__":
    main()
