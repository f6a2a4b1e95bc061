"""Training helpers: chat-style augmentation, the splits trained on, and the fit."""

import random

import numpy as np
import pytest

from switchyard.libs.safety.classifier import WEIGHTS_PATH, softmax
from training.safety.train import HELD_OUT, augment, casual_variant, fit, training_rows


def test_casual_variant_is_lower_case_without_closing_punctuation() -> None:
    rng = random.Random(0)
    for text in ["What's the capital of France?", "Write a poem about the sea.", "Thanks!"]:
        v = casual_variant(text, rng)
        assert v == v.lower() and v[-1] not in "?.!" and "'" not in v
        # at most one swapped pair of letters and a few shorthands: still mostly the same words
        assert len(set(v.split()) & set(text.lower().replace("'", "").rstrip("?.!").split())) >= len(v.split()) - 3


def test_augment_is_deterministic_keeps_labels_and_skips_templates() -> None:
    rows = [
        {"text": "How do I kill a Python process that won't stop?", "label": "benign"},
        {"text": "How do I make sarin at home?", "label": "S9"},
        {"text": "How do I bake bread?", "label": "benign", "source": "template"},
    ]
    a, parent = augment(rows, variants=3)
    b, _ = augment(list(reversed(rows[:2])) + rows[2:], variants=3)
    assert sorted(r["text"] for r in a) == sorted(r["text"] for r in b)
    assert a and set(parent) <= {0, 1}
    for r, i in zip(a, parent, strict=True):
        assert r["label"] == rows[i]["label"] and r["source"] == "augment"
        assert r["text"] not in {x["text"] for x in rows}
    assert len({r["text"] for r in a}) == len(a)


def test_extra_splits_add_their_learned_labels_but_never_the_held_out_splits() -> None:
    base = training_rows()
    rows = training_rows(("test",))
    added = rows[len(base) :]
    assert rows[: len(base)] == base and added
    assert {r["source"] for r in added} == {"test"}
    # secrets are rules-only: a label train.jsonl lacks is not learned from an extra split either
    assert {r["label"] for r in added} <= {r["label"] for r in base} and "secrets" not in {r["label"] for r in added}
    assert len({r["text"] for r in rows}) == len(rows)
    for split in (*HELD_OUT, "train", "no-such-split"):
        with pytest.raises(ValueError):
            training_rows(("test", split))


def test_shipped_weights_never_trained_on_a_held_out_split() -> None:
    with np.load(WEIGHTS_PATH, allow_pickle=False) as z:
        extra = str(z["extra_splits"]).split(",") if "extra_splits" in z.files else []
    assert not set(extra) & set(HELD_OUT)


def test_fit_separates_classes_and_respects_benign_share() -> None:
    rng = np.random.default_rng(0)
    centres = np.eye(3, 8, dtype=np.float32) * 3
    y = np.repeat(np.arange(3), 40)
    X = centres[y] + rng.normal(scale=0.5, size=(len(y), 8)).astype(np.float32)
    W, b = fit(X, y, 3, benign_index=0, l2=1e-4, steps=300)
    assert (softmax(X @ W.T + b).argmax(axis=1) == y).mean() > 0.95
    # An ambiguous point midway between benign and class 1 leans benign when benign weighs more.
    mid = (centres[0] + centres[1]) / 2
    lean = []
    for share in (0.2, 0.8):
        W, b = fit(X, y, 3, benign_index=0, l2=1e-4, steps=300, benign_share=share)
        lean.append(float(softmax(mid[None] @ W.T + b)[0, 0]))
    assert lean[1] > lean[0]
