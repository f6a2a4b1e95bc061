"""Training helpers: chat-style augmentation, the fit, and the weight file the classifier reads."""

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from libs.safety.classifier import WEIGHTS_PATH, EmbeddingClassifier, softmax
from libs.safety.train import HELD_OUT, augment, casual_variant, fit, training_rows


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


class _FakeEmbedder:
    """Stands in for MiniLM: records which method the classifier called."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(("embed", None))
        return np.ones((len(texts), 4), dtype=np.float32) / 2

    def embed_layers(self, texts: list[str], layers: tuple[int, ...]) -> np.ndarray:
        self.calls.append(("embed_layers", layers))
        return np.ones((len(texts), 4 * len(layers)), dtype=np.float32) / 2


def _write(path: Path, dim: int, layers: tuple[int, ...] | None) -> None:
    rng = np.random.default_rng(1)
    extra: dict[str, Any] = {} if layers is None else {"layers": np.array(layers, dtype=np.int64)}
    np.savez_compressed(
        path,
        W=rng.normal(size=(3, dim)).astype(np.float32),
        b=np.zeros(3, dtype=np.float32),
        classes=np.array(["S1", "benign", "S9"]),
        version=np.array("test-model"),
        **extra,
    )


@pytest.mark.parametrize(("layers", "method"), [((4, 6), "embed_layers"), (None, "embed")])
def test_classifier_reads_the_layers_its_weights_were_trained_on(
    tmp_path: Path, layers: tuple[int, ...] | None, method: str
) -> None:
    path = tmp_path / "w.npz"
    _write(path, 8 if layers else 4, layers)
    fake = _FakeEmbedder()
    clf = EmbeddingClassifier(path, embedder=fake)  # type: ignore[arg-type]
    scores = clf.score("some text")
    assert [c[0] for c in fake.calls] == [method]
    if layers:
        assert fake.calls[0][1] == layers and clf.layers == layers
    # the top harm class scores 1 - P(benign); the numbers survive the save/load round trip
    p = softmax(clf.features(["some text"]) @ clf.W.T + clf.b)[0]
    top = max(("S1", "S9"), key=lambda c: p[clf.classes.index(c)])
    assert scores[top] == pytest.approx(1 - p[1], abs=1e-6)


def test_harm_scores_name_close_second_classes_without_new_false_positives() -> None:
    from libs.safety.classifier import SECONDARY_SHARE, harm_scores

    # columns: benign, A, B, C
    p = np.array(
        [
            [0.05, 0.60, 0.33, 0.02],  # harmful, B holds 35 % of the harm mass: named too
            [0.20, 0.70, 0.08, 0.02],  # harmful, B holds 10 %: keeps its own probability
            [0.90, 0.06, 0.04, 0.00],  # benign: every harm class stays below 1 - P(benign)
        ],
        dtype=np.float32,
    )
    h = harm_scores(p, 0)
    assert h[0, 1] == pytest.approx(0.95) and h[0, 2] == pytest.approx(0.95) and h[0, 3] == pytest.approx(0.02)
    assert h[1, 1] == pytest.approx(0.80) and h[1, 2] == pytest.approx(0.08)
    assert h[2, 1:].max() == pytest.approx(0.10)
    np.testing.assert_allclose(h[:, 0], p[:, 0])  # the benign column is untouched
    # No class ever scores above 1 - P(benign), so the rule cannot flag a text the top class did not.
    assert (np.delete(h, 0, axis=1).max(axis=1) <= 1 - p[:, 0] + 1e-6).all()
    assert 0 < SECONDARY_SHARE < 0.5
    # secondary_share=1 names the most likely harm class only (the rule before the fifth round)
    assert harm_scores(p, 0, secondary_share=1.0)[0, 2] == pytest.approx(0.33)
