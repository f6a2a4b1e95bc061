"""Train the output check's early exit: ``python -m training.safety.screen``.

Distils the shipped classifier (``switchyard/libs/safety/data/classifier.npz``) into a small head on its
own MiniLM's layer-``k`` states (``switchyard/libs/safety/screen.py``). The teacher is the classifier
itself: every text it was trained on (``train`` plus the extra splits it names, with the same chat-style
copies) and each of their sentences is scored by MiniLM as an answer is (the highest score over the harm
categories), and the head learns whether that score reaches the answer flag bar (less ``--score-margin``:
a score just under the bar may flag in another batch). The same pass pools the
states the head reads (layers 0 to 3), cached in the temp dir, so one teacher pass serves every ``k``.
Nothing is downloaded: MiniLM and its tokenizer are the installed ones.

The head's bar (``clear_below``) is the lower of two: on ``--val-split`` (``test10``: held out of the
classifier's training and of the head's), the highest bar at which at least ``--recall`` of the held-out
chunks MiniLM would flag still go on through MiniLM, lowered by ``--margin`` (in logits); and on the
``calib`` part of the everyday answers (``data/safety/ood/answers.jsonl``, the part that chooses bars),
streamed and cut into sentences as safety_out cuts them, the bar below which none of the sentences
MiniLM flags falls, lowered by the same margin. ``eval`` and ``holdout`` are never read, nor the ``test`` part of the everyday
answers, which is only scored (here and by ``make eval-safety``). Each ``--exit-layer`` and head kind
(``--hidden 0``: logistic regression) is fitted and its figures printed; the one whose pass costs least
per token on the calib part (every token through ``k`` layers, the escalated chunks' on through all six)
is written to ``switchyard/libs/safety/data/screen.npz``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from switchyard.libs.embeddings import MAX_TOKENS
from switchyard.libs.safety.calibration import shipped_calibration
from switchyard.libs.safety.classifier import CHUNK_CHARS, WEIGHTS_PATH, EmbeddingClassifier, split_texts
from switchyard.libs.safety.guard import shared_classifier
from switchyard.libs.safety.rules import normalize
from switchyard.libs.safety.screen import SCREEN_PATH, Screen
from switchyard.libs.safety.taxonomy import HARM_CATEGORIES
from training.safety.ood import ANSWERS as OOD_ANSWERS
from training.safety.splits import split_path
from training.safety.train import augment, load, training_rows

RECALL = 0.995
# Logits taken off the chosen bar: a safety margin for text unlike the held-out split (answers, not requests).
MARGIN = 0.5
VAL_SPLIT = "test10"
# Taught and judged as "MiniLM flags it" from this far below the answer bar: a chunk's score moves by up to
# about 0.02 with the texts it is batched with in bf16 (docs/benchmarks.md), so a teacher score just under
# the bar may flag at run time.
SCORE_MARGIN = 0.05
# The layers a head may read: the token embeddings (0) and the exits tried.
EXITS = (1, 2, 3)
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


def teacher_pass(clf: EmbeddingClassifier, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM's answer-side score of each (normalised) text (the highest harm-category score) and the
    pooled states of layers 0 and ``EXITS`` side by side (float16), from one pass per text. Texts of an
    earlier run are read from a cache in the temp dir."""
    harm = [clf.classes.index(c) for c in HARM_CATEGORIES if c in clf.classes]
    layers = (0, *EXITS)
    key = hashlib.sha256(f"screen-exit:{clf.version}:{clf.embedder.dtype}:{layers}".encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"switchyard-safety-exit-{key}.npz"
    known: dict[str, tuple[float, np.ndarray]] = {}
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            known = {str(t): (float(s), x) for t, s, x in zip(z["texts"], z["score"], z["X"], strict=True)}
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    for start in range(0, len(missing), 2048):
        batch = missing[start : start + 2048]
        feats = clf.embedder.embed_layers(batch, (*layers, *clf.layers))
        pooled = feats[:, : clf.embedder.dim * len(layers)].astype(np.float16)
        score = clf.category_scores(feats[:, clf.embedder.dim * len(layers) :])[:, harm].max(axis=1)
        known.update((t, (float(s), x)) for t, s, x in zip(batch, score, pooled, strict=True))
        np.savez(
            path,
            texts=np.array(list(known)),
            score=np.array([v[0] for v in known.values()], dtype=np.float32),
            X=np.stack([v[1] for v in known.values()]),
        )
        print(f"  teacher pass: {min(start + 2048, len(missing))} of {len(missing)} new texts", flush=True)
    return np.array([known[t][0] for t in texts], dtype=np.float32), np.stack([known[t][1] for t in texts])


def head_input(pooled: np.ndarray, exit_layer: int, dim: int) -> np.ndarray:
    """What a head exiting after ``exit_layer`` reads of ``teacher_pass``'s pooled blocks: layers 0 and ``exit_layer``."""
    k = 1 + EXITS.index(exit_layer)
    return np.concatenate([pooled[:, :dim], pooled[:, k * dim : (k + 1) * dim]], axis=1).astype(np.float32)


def fit_head(X: np.ndarray, y: np.ndarray, hidden: int, seed: int = 0) -> list[np.ndarray]:
    """Weights ``[W0, b0, (W1, b1)]`` of a logistic regression (``hidden`` 0) or a one-hidden-layer ReLU
    MLP, fitted with balanced class weights; the inputs' standardisation is folded into ``W0``, ``b0``."""
    import torch

    torch.manual_seed(seed)
    mu, sd = X.mean(axis=0), X.std(axis=0) + 1e-6
    Xt = torch.from_numpy((X - mu) / sd)
    yt = torch.from_numpy(y.astype(np.float32))
    pos = float(y.mean())
    w = torch.where(yt > 0, 0.5 / pos, 0.5 / (1 - pos))
    if hidden:
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
        epochs, wd = 30, 1e-4
    else:
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 1))
        epochs, wd = 40, 1e-4
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=wd)
    for _ in range(epochs):
        for idx in torch.randperm(len(Xt)).split(256):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(Xt[idx])[:, 0], yt[idx], weight=w[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    layers = [m for m in net if isinstance(m, torch.nn.Linear)]
    W0 = layers[0].weight.detach().numpy().T / sd[:, None]
    b0 = layers[0].bias.detach().numpy() - mu / sd @ layers[0].weight.detach().numpy().T
    out = [W0.astype(np.float32), b0.astype(np.float32)]
    for m in layers[1:]:
        out += [m.weight.detach().numpy().T.astype(np.float32), m.bias.detach().numpy().astype(np.float32)]
    return out


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

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=SCREEN_PATH)
    ap.add_argument("--recall", type=float, default=RECALL, help="share of held-out flagged chunks escalated")
    ap.add_argument("--margin", type=float, default=MARGIN, help="logits taken off the chosen bar")
    ap.add_argument(
        "--score-margin", type=float, default=SCORE_MARGIN, help="teacher scores this far below the bar count"
    )
    ap.add_argument("--exit-layer", type=int, nargs="+", default=list(EXITS), choices=EXITS)
    ap.add_argument("--hidden", type=int, nargs="+", default=[0, 64], help="hidden units of the MLP (0: linear)")
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
    # What the head must send on: MiniLM's score at or above this (the bar, less the margin).
    taught = bar - args.score_margin
    with OOD_ANSWERS.open(encoding="utf-8") as fh:
        ood_rows = [json.loads(line) for line in fh if line.strip()]
    sets = {
        "train": with_sentences(pieces([r["text"] for r in rows])),
        f"held out ({args.val_split})": with_sentences(pieces([r["text"] for r in load(split_path(args.val_split))])),
        "everyday answers, calib part (streamed sentences)": pieces(
            answer_sentences([r["text"] for r in ood_rows if r["part"] == "calib"])
        ),
        "everyday answers, test part (streamed sentences)": pieces(
            answer_sentences([r["text"] for r in ood_rows if r["part"] == "test"])
        ),
    }
    scored = {name: teacher_pass(clf, texts) for name, texts in sets.items()}
    print(f"teacher pass for {sum(len(t) for t in sets.values())} chunks in {time.time() - t0:.0f}s", flush=True)
    (y_train, p_train), (y_val, p_val), (y_calib, p_calib), _ = scored.values()
    dim = clf.embedder.dim
    calib_tokens = np.minimum(clf.embedder.count_tokens(list(sets.values())[2]), MAX_TOKENS)
    best: tuple[float, int, Screen] | None = None
    for k in args.exit_layer:
        for hidden in args.hidden:
            t1 = time.time()
            # Scored below with the weights as shipped (float16).
            weights = [
                w.astype(np.float16).astype(np.float32)
                for w in fit_head(head_input(p_train, k, dim), y_train >= taught, hidden)
            ]
            screen = Screen(weights, exit_layer=k, bar=bar, classifier_version=clf.version)
            val = screen.logits(head_input(p_val, k, dim))
            clear_below = choose_bar(val, y_val >= taught, args.recall, args.margin)
            calib = screen.logits(head_input(p_calib, k, dim))
            if (y_calib >= taught).any():
                # The margin here too: a sentence's pooled states, and so its logit, move a little with the
                # texts it is batched with (one everyday sentence fell 0.01 logits under a margin-less bar).
                clear_below = min(clear_below, choose_bar(calib, y_calib >= taught, 1.0, args.margin))
            screen.clear_below = clear_below
            print(f"exit after layer {k}, hidden {hidden}: clear below {clear_below:.3f} ({time.time() - t1:.0f}s)")
            for name, (y, p) in scored.items():
                print("  " + figures(name, screen.logits(head_input(p, k, dim)) >= clear_below, y >= taught))
            cleared = float((val < clear_below)[y_val < taught].mean())
            # What a pass costs, in layers of MiniLM's six per token: every token runs to k, the escalated
            # chunks' tokens on to six (longer sentences are escalated more often than short ones).
            went_on = float(calib_tokens[calib >= clear_below].sum() / calib_tokens.sum())
            cost = k / 6 + (1 - k / 6) * went_on
            print(
                f"  calib tokens that go on: {100 * went_on:.1f} %, cost {cost:.3f} of the whole pass; "
                f"test10 others cleared {100 * cleared:.1f} %"
            )
            if best is None or cost < best[0]:
                best = (cost, hidden, screen)
    assert best is not None
    _, hidden, screen = best
    blob = b"".join(w.tobytes() for w in screen.weights) + np.float32(screen.clear_below).tobytes()
    screen.version = f"screen-exit{screen.exit_layer}-{dt.date.today():%Y%m%d}-{hashlib.sha256(blob).hexdigest()[:8]}"
    arrays: dict[str, np.ndarray] = {f"w{i}": w.astype(np.float16) for i, w in enumerate(screen.weights)}
    arrays |= {
        "exit_layer": np.array(screen.exit_layer),
        "clear_below": np.array(screen.clear_below),
        "bar": np.array(bar),
        "score_margin": np.array(args.score_margin),
        "classifier": np.array(clf.version),
        "version": np.array(screen.version),
        "recall": np.array(args.recall),
        "margin": np.array(args.margin),
        "val_split": np.array(args.val_split),
        "chunk_chars": np.array(CHUNK_CHARS),
    }
    np.savez_compressed(args.out, **arrays)  # type: ignore[arg-type]
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), version {screen.version}, hidden {hidden}")


if __name__ == "__main__":
    main()
