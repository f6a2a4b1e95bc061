"""Train the embedding classifier: ``python -m libs.safety.train``.

Multinomial logistic regression (plain numpy, full-batch Adam, L2) over MiniLM features of
``data/train.jsonl`` (mean-pooled layers ``LAYERS``, see ``classifier.py``). ``--cv`` picks the L2 strength by grouped 5-fold cross-validation on the
training set only; ``data/eval.jsonl`` is never read here. Writes ``data/classifier.npz``.

Every hand-written training line is also trained on in ``AUGMENT_VARIANTS`` chat-style copies
(lower case, no apostrophes or closing punctuation, sometimes a swapped-letter typo or "u"/"pls"
shorthand; see ``casual_variant``), for benign and harmful labels alike: without them the model
learned that sloppy typing means harm (benign FPR 7.8 % on a lower-cased, typo'd copy of the dev
set against 0.9 % on the original).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import random
import re
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from libs.safety.classifier import WEIGHTS_PATH, harm_scores, softmax
from libs.safety.taxonomy import BENIGN

DATA = Path(__file__).resolve().parent / "data"
L2_GRID = (3e-6, 1e-5, 3e-5, 1e-4)
FOLDS = 5
BENIGN_SHARE = 0.6
DEFAULT_L2 = 1e-5
# MiniLM layers whose mean-pooled states feed the classifier; chosen by grouped cross-validation
# on the training set (layer 6 alone: mean recall 0.86, benign FPR 0.10; 4+6: 0.89, 0.07).
LAYERS = (4, 6)
AUGMENT_VARIANTS = 3
_SHORTHAND = ((" you ", " u "), (" your ", " ur "), (" please", " pls"), ("what is", "whats"), ("i am", "im"))


def casual_variant(text: str, rng: random.Random) -> str:
    """A chat-style copy of ``text``: lower case, no apostrophes or closing punctuation, and
    (at random) one swapped pair of letters in a word and a few shorthands."""
    t = re.sub(r"[?.!]+$", "", text.lower().replace("'", "").replace("\u2019", "")).strip()
    words = t.split()
    if len(words) > 3 and rng.random() < 0.7:
        i = rng.randrange(len(words))
        w = words[i]
        if len(w) > 3:
            j = rng.randrange(len(w) - 1)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    t = " ".join(words)
    for a, b in _SHORTHAND:
        if rng.random() < 0.5:
            t = t.replace(a, b)
    return t


def augment(rows: list[dict[str, str]], variants: int = AUGMENT_VARIANTS) -> tuple[list[dict[str, str]], list[int]]:
    """Chat-style copies of the hand-written rows (templates are skipped) and, for each copy, the
    index of the row it came from. Deterministic: each copy's randomness is seeded by its text."""
    known = {r["text"] for r in rows}
    out: list[dict[str, str]] = []
    parent: list[int] = []
    for i, r in enumerate(rows):
        if r.get("source") == "template":
            continue
        for k in range(variants):
            t = casual_variant(r["text"], random.Random(zlib.crc32(r["text"].encode()) + k))
            if t and t not in known:
                known.add(t)
                out.append({"text": t, "label": r["label"], "source": "augment"})
                parent.append(i)
    return out, parent
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
    benign_share: float = BENIGN_SHARE,
) -> tuple[np.ndarray, np.ndarray]:
    d = X.shape[1]
    Y = np.eye(n_classes, dtype=np.float32)[y]
    counts = np.maximum(np.bincount(y, minlength=n_classes), 1).astype(np.float32)
    # Benign carries half the total weight and the harm classes share the other half equally:
    # plain "balanced" weights would give benign 1/17 of the say and flag every edgy question.
    share = np.full(n_classes, (1 - benign_share) / (n_classes - 1), dtype=np.float32)
    share[benign_index] = benign_share
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
    ap.add_argument("--benign-share", type=float, default=BENIGN_SHARE)
    ap.add_argument("--variants", type=int, default=AUGMENT_VARIANTS, help="chat-style copies per line")
    args = ap.parse_args()

    from libs.embeddings import MODEL_NAME, get_embedder

    rows = load(DATA / "train.jsonl")
    n_orig = len(rows)
    extra, parent = augment(rows, args.variants)
    rows += extra
    classes = sorted({r["label"] for r in rows})
    y = np.array([classes.index(r["label"]) for r in rows])
    t0 = time.time()
    layers = LAYERS

    def features(texts: list[str]) -> np.ndarray:
        return get_embedder().embed_layers(texts, layers)

    X = embed_cached([r["text"] for r in rows], f"{MODEL_NAME}@layers={layers}", features)
    print(
        f"embedded {n_orig} training examples + {len(extra)} chat-style copies in {time.time() - t0:.1f}s; "
        f"classes: {classes}"
    )

    # Template rows sharing one objective stay in one fold, so CV does not score a goal it trained on.
    groups = np.array([zlib.crc32(r["text"].split("{")[0].encode()) for r in rows])
    for i, r in enumerate(rows):
        if r.get("source") == "template":
            groups[i] = zlib.crc32(r["text"].rstrip("?.").split(" ")[-1].encode())
    groups[n_orig:] = groups[parent]  # a copy stays in its original's fold
    fold = groups % FOLDS
    orig = np.arange(len(rows)) < n_orig

    bi = classes.index(BENIGN)
    l2 = args.l2
    if args.cv:
        best = (-1.0, L2_GRID[0])
        for cand in L2_GRID:
            P = np.zeros((len(rows), len(classes)), dtype=np.float32)
            for k in range(FOLDS):
                tr, te = fold != k, (fold == k) & orig
                W, b = fit(X[tr], y[tr], len(classes), bi, cand, steps=600, benign_share=args.benign_share)
                P[te] = softmax(X[te] @ W.T + b)
            rec, fpr = report(P[orig], y[orig], classes)
            print(f"  cv l2={cand:g}: mean recall@{BLOCK_AT}={rec:.3f} benign FPR@{FLAG_AT}={fpr:.3f}")
            if rec - 3 * fpr > best[0]:
                best = (rec - 3 * fpr, cand)
        l2 = best[1]
    W, b = fit(X, y, len(classes), bi, l2, benign_share=args.benign_share)
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
        benign_share=np.array(args.benign_share),
        n_train=np.array(n_orig),
        n_augmented=np.array(len(extra)),
    )
    print(f"l2={l2:g}; wrote {args.out} ({args.out.stat().st_size} bytes), version {version}")


if __name__ == "__main__":
    main()
