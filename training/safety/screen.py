"""Train the output check's first stage: ``python -m training.safety.screen``.

Distils the shipped classifier (``switchyard/libs/safety/data/classifier.npz``) into the hashed n-gram
linear model of ``switchyard/libs/safety/screen.py``. The teacher is the classifier itself: every text it
was trained on (``train`` plus the extra splits it names, with the same chat-style copies) and each of
their sentences is scored by MiniLM as an answer is (the highest score over the harm categories), and the
screen learns, by weighted logistic regression, whether that score reaches the answer flag bar. Nothing is
downloaded: MiniLM and its tokenizer are the installed ones.

The screen's bar (``clear_below``) is the lower of two: on ``--val-split`` (``test10``: held out of the
classifier's training and of the screen's), the highest bar at which at least ``--recall`` of the held-out
chunks MiniLM would flag still go to MiniLM, lowered by ``--margin`` (in logits); and on the ``calib`` part
of the everyday answers (``data/safety/ood/answers.jsonl``, the part that chooses bars), streamed and cut
into sentences as safety_out cuts them, the bar below which none of the sentences MiniLM flags falls.
``eval`` and ``holdout`` are never read, nor the ``test`` part of the everyday answers, which is only
scored (here and by ``make eval-safety``). Writes ``switchyard/libs/safety/data/screen.npz``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np

from switchyard.libs.safety.calibration import shipped_calibration
from switchyard.libs.safety.classifier import CHUNK_CHARS, WEIGHTS_PATH, EmbeddingClassifier, split_texts
from switchyard.libs.safety.guard import shared_classifier
from switchyard.libs.safety.rules import normalize
from switchyard.libs.safety.screen import SCREEN_PATH, Screen, feature_indices
from switchyard.libs.safety.taxonomy import HARM_CATEGORIES
from training.safety.ood import ANSWERS as OOD_ANSWERS
from training.safety.splits import split_path
from training.safety.train import augment, embed_cached, load, training_rows

BUCKETS = 1 << 18
RECALL = 0.995
# Logits taken off the chosen bar: a safety margin for text unlike the held-out split (answers, not requests).
MARGIN = 0.5
C = 4.0
VAL_SPLIT = "test10"
_SENTENCE = re.compile(r"(?<=[.!?\n])\s+")


def answer_bar() -> float:
    """The lowest answer flag bar of the shipped calibration: a chunk scoring below it flags nothing."""
    return min(b.flag_at for c, b in shipped_calibration().answers.items() if c in HARM_CATEGORIES)


def with_sentences(texts: list[str]) -> list[str]:
    """``texts`` and, for those of several sentences, each sentence alone (an answer is judged per sentence)."""
    out = dict.fromkeys(texts)
    for t in texts:
        parts = [p for p in _SENTENCE.split(t) if p.strip()]
        if len(parts) > 1:
            out.update(dict.fromkeys(parts))
    return list(out)


def teacher_scores(clf: EmbeddingClassifier, texts: list[str]) -> np.ndarray:
    """MiniLM's answer-side score of each (normalised) text: the highest harm-category score."""
    harm = [clf.classes.index(c) for c in HARM_CATEGORIES if c in clf.classes]

    def score(batch: list[str]) -> np.ndarray:
        return clf.category_scores(clf.features(batch))[:, harm].max(axis=1, keepdims=True)

    return embed_cached(texts, f"screen-teacher:{clf.version}", score)[:, 0]


def design(screen: Screen, texts: list[str]) -> object:
    """The sparse feature matrix the screen's weights multiply (the same features ``Screen.scores`` sums)."""
    from scipy.sparse import csr_matrix

    rows, cols, vals = [], [], []
    for i, ids in enumerate(screen.piece_ids(texts)):
        f = feature_indices(ids, screen.vocab, screen.buckets)
        rows.append(np.full(len(f), i))
        cols.append(f)
        vals.append(np.full(len(f), 1.0 / np.sqrt(max(len(f), 1)), dtype=np.float32))
    return csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(texts), screen.vocab + screen.buckets),
    )


def choose_bar(scores: np.ndarray, positive: np.ndarray, recall: float, margin: float) -> float:
    """The highest bar that keeps ``recall`` of the positives at or above it, lowered by ``margin``."""
    pos = np.sort(scores[positive])
    if not len(pos):
        raise ValueError("no held-out chunk reaches the answer bar: cannot choose the screen's bar")
    k = int(np.floor((1 - recall) * len(pos)))
    return float(pos[k]) - margin


def figures(name: str, escalated: np.ndarray, positive: np.ndarray) -> str:
    n_pos = int(positive.sum())
    kept = int((escalated & positive).sum())
    benign = ~positive
    return (
        f"{name}: {len(positive)} chunks; escalated {100 * escalated.mean():.1f} %; "
        f"chunks MiniLM flags: {n_pos}, escalated {kept} ({100 * kept / max(n_pos, 1):.2f} %); "
        f"others cleared {100 * (~escalated & benign).sum() / max(benign.sum(), 1):.1f} %"
    )


def answer_sentences(texts: list[str]) -> list[str]:
    """What safety_out hands the classifier for these answers, streamed in token-sized pieces: each
    finished sentence, normalised, as the guard scores it."""
    from switchyard.libs.safety.guard import InputGuard
    from switchyard.libs.safety.stream import StreamGuard
    from training.safety.eval import token_pieces

    guard = InputGuard(use_embeddings=True)
    out: list[str] = []
    for text in texts:
        sg = StreamGuard(guard=guard, judge_inline=False, release="stream")
        for p in token_pieces(text):
            out += [normalize(sg.judge_text(s)) for s in sg.feed(p).to_judge]
        out += [normalize(sg.judge_text(s)) for s in sg.finish().to_judge]
    return out


def pieces(texts: list[str]) -> list[str]:
    """What the classifier reads of each text: its normalised chunks (``split_texts``)."""
    return split_texts([normalize(t) for t in texts])[0]


def main() -> None:
    import torch
    from sklearn.linear_model import LogisticRegression

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=SCREEN_PATH)
    ap.add_argument("--recall", type=float, default=RECALL, help="share of held-out flagged chunks escalated")
    ap.add_argument("--margin", type=float, default=MARGIN, help="logits taken off the chosen bar")
    ap.add_argument("--c", type=float, default=C, help="inverse L2 strength of the logistic regression")
    ap.add_argument("--buckets", type=int, default=BUCKETS, help="hashed slots for word-piece pairs")
    ap.add_argument("--val-split", default=VAL_SPLIT)
    args = ap.parse_args()
    t0 = time.time()
    clf = shared_classifier()
    with np.load(WEIGHTS_PATH) as z:
        extra = tuple(s for s in str(z["extra_splits"]).split(",") if s)
    if args.val_split in extra or args.val_split in ("eval", "holdout"):
        raise SystemExit(f"{args.val_split} was trained on or is held out for the eval: choose another")
    rows = training_rows(extra)
    rows += augment(rows)[0]
    bar = answer_bar()
    train_texts = with_sentences(pieces([r["text"] for r in rows]))
    y_score = teacher_scores(clf, train_texts)
    val_texts = with_sentences(pieces([r["text"] for r in load(split_path(args.val_split))]))
    val_score = teacher_scores(clf, val_texts)
    with OOD_ANSWERS.open(encoding="utf-8") as fh:
        ood_rows = [json.loads(line) for line in fh if line.strip()]
    calib_texts = pieces(answer_sentences([r["text"] for r in ood_rows if r["part"] == "calib"]))
    calib_score = teacher_scores(clf, calib_texts)
    ood_texts = pieces(answer_sentences([r["text"] for r in ood_rows if r["part"] == "test"]))
    ood_score = teacher_scores(clf, ood_texts)
    print(
        f"teacher scores for {len(train_texts)} + {len(val_texts)} + {len(calib_texts)} + {len(ood_texts)} chunks in {time.time() - t0:.0f}s"
    )

    screen = Screen(np.zeros(0), 0.0, vocab=0, buckets=args.buckets)
    screen.vocab = int(screen.tokenizer.get_vocab_size())
    X = design(screen, train_texts)
    y = y_score >= bar
    t1 = time.time()
    lr = LogisticRegression(C=args.c, class_weight="balanced", max_iter=2000)
    lr.fit(X, y)
    # Scored below with the weights as shipped (float16).
    w = lr.coef_[0].astype(np.float16).astype(np.float32)
    b = float(lr.intercept_[0])
    print(f"fitted on {len(train_texts)} chunks ({int(y.sum())} MiniLM flags) in {time.time() - t1:.0f}s")

    val = np.asarray(design(screen, val_texts) @ w) + b
    calib = np.asarray(design(screen, calib_texts) @ w) + b
    clear_below = choose_bar(val, val_score >= bar, args.recall, args.margin)
    if (calib_score >= bar).any():
        clear_below = min(clear_below, choose_bar(calib, calib_score >= bar, 1.0, 0.0))
    ood = np.asarray(design(screen, ood_texts) @ w) + b
    tr = np.asarray(X @ w) + b
    print(figures("train", tr >= clear_below, y))
    print(figures(f"held out ({args.val_split})", val >= clear_below, val_score >= bar))
    print(figures("everyday answers, calib part (streamed sentences)", calib >= clear_below, calib_score >= bar))
    print(figures("everyday answers, test part (streamed sentences)", ood >= clear_below, ood_score >= bar))
    digest = hashlib.sha256(w.tobytes() + np.float32(b).tobytes() + np.float32(clear_below).tobytes()).hexdigest()[:8]
    version = f"screen-ngram-{dt.date.today():%Y%m%d}-{digest}"
    np.savez_compressed(
        args.out,
        weights=w.astype(np.float16),
        bias=np.array(b),
        vocab=np.array(screen.vocab),
        buckets=np.array(args.buckets),
        clear_below=np.array(clear_below),
        bar=np.array(bar),
        classifier=np.array(clf.version),
        version=np.array(version),
        recall=np.array(args.recall),
        margin=np.array(args.margin),
        val_split=np.array(args.val_split),
        chunk_chars=np.array(CHUNK_CHARS),
    )
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), version {version}, clear below {clear_below:.3f}")


if __name__ == "__main__":
    main()
