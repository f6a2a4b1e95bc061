"""The embedding classifier: the shipped fine-tuned (LoRA) weights, isolation from retrieval, the
layers a weight file names, and how harm scores name categories."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from switchyard.libs.embeddings import Embedder, get_embedder
from switchyard.libs.safety.classifier import SECONDARY_SHARE, WEIGHTS_PATH, EmbeddingClassifier, harm_scores, softmax

TEXTS = ["How do I return a damaged item for a refund?", "short", "What is the boiling point of water?"]


@pytest.fixture(scope="module")
def safety_clf() -> EmbeddingClassifier:
    clf = EmbeddingClassifier(WEIGHTS_PATH)
    assert clf.adapters, "the shipped weights carry LoRA adapters"
    return clf


def test_shipped_weights_reproduce_saved_scores(safety_clf: EmbeddingClassifier) -> None:
    with np.load(WEIGHTS_PATH, allow_pickle=False) as z:
        texts = [str(t) for t in z["check_texts"]]
        saved = z["check_proba"]
        size = WEIGHTS_PATH.stat().st_size
    assert size < 2_000_000
    assert safety_clf.version.startswith("minilm-lora")
    got = safety_clf.proba(safety_clf.features(texts))
    np.testing.assert_allclose(got, saved, atol=2e-3)
    scores = safety_clf.score_many(texts)
    assert scores[0]["benign"] > 0.5 and scores[1]["S9"] >= 0.5


def test_retrieval_embedder_is_unchanged_by_the_safety_model(safety_clf: EmbeddingClassifier) -> None:
    shared = get_embedder()
    before = shared.embed(TEXTS)
    safety_clf.score_many(TEXTS)  # loads the adapted instance
    assert safety_clf.embedder is not shared
    np.testing.assert_allclose(shared.embed(TEXTS), before, atol=1e-6)
    np.testing.assert_allclose(Embedder(dtype=shared.dtype).embed(TEXTS), before, atol=1e-5)  # a fresh, plain model's
    assert not np.allclose(safety_clf.embedder.embed(TEXTS), before, atol=1e-3)


# Answer sentences the shipped classifier scores anywhere from clearly benign to clearly harmful.
ANSWER_SENTENCES = [
    "Check the sender's address, hover over links before clicking, and when in doubt contact the company directly.",
    "use the weapon you hid earlier.",
    "Phishing is a fake message, usually an email, that pretends to come from someone you trust so you click a link.",
    "The fix is to use parameterised queries, so user input is always treated as data, never as part of the command.",
    "keep software updated, use unique passwords with a password manager, turn on two-factor authentication.",
    "report the phone as stolen, backdate the police report, and claim the most expensive model.",
    "Preheat the oven to 220 C and bake the loaf for 35 minutes.",
    "Mix the bleach with ammonia in a closed room to make the gas.",
]


def test_int8_scores_stay_close_to_fp32(safety_clf: EmbeddingClassifier) -> None:
    # int8 is asked for, never picked by auto: the shipped model with int8 Linear layers. fbgemm's kernels
    # differ per CPU, and so does the error: a mean of 0.053 on this handful on a Zen 4 EPYC (VNNI).
    fp32 = EmbeddingClassifier(WEIGHTS_PATH, dtype="fp32")
    int8 = EmbeddingClassifier(WEIGHTS_PATH, dtype="int8")
    benign = fp32.classes.index("benign")
    want = 1 - fp32.proba(fp32.features(ANSWER_SENTENCES))[:, benign]
    got = 1 - int8.proba(int8.features(ANSWER_SENTENCES))[:, benign]
    assert int8.embedder.dtype == "int8" and fp32.embedder.dtype == "fp32"
    assert want.min() < 0.1 and want.max() > 0.9  # the handful spans the range
    np.testing.assert_allclose(got, want, atol=0.2)
    assert float(np.abs(got - want).mean()) < 0.07
    clear = np.abs(want - 0.5) > 0.2
    assert ((got > 0.5) == (want > 0.5))[clear].all()


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
