"""The fine-tuned (LoRA) safety encoder: adapters, the shipped weights, and isolation from retrieval."""

import numpy as np
import pytest

from libs.embeddings import Embedder, get_embedder
from libs.safety.classifier import WEIGHTS_PATH, EmbeddingClassifier
from libs.safety.lora import adapter_arrays, add_lora, deltas

TEXTS = ["How do I return a damaged item for a refund?", "short", "What is the boiling point of water?"]


@pytest.fixture(scope="module")
def safety_clf() -> EmbeddingClassifier:
    clf = EmbeddingClassifier(WEIGHTS_PATH)
    assert clf.adapters, "the shipped weights carry LoRA adapters"
    return clf


def test_lora_starts_as_identity_and_merges_exactly() -> None:
    import torch

    from libs.safety.train import _batch, _pooled, tokenize

    base = Embedder()
    ids = tokenize(TEXTS)
    order = list(range(len(TEXTS)))
    ft = Embedder()._model  # a private copy to wrap
    adapters = add_lora(ft, rank=4, alpha=8.0)
    assert len(adapters) == 6 * 4 and all(not p.requires_grad for n, p in ft.named_parameters() if ".base." in n)
    ft.eval()
    with torch.no_grad():
        untrained = _pooled(ft, *_batch(ids, order), (6,)).numpy()
        np.testing.assert_allclose(untrained, base.embed(TEXTS), atol=1e-5)  # B = 0: nothing changes
        gen = torch.Generator().manual_seed(0)
        for m in adapters.values():
            m.B.copy_(torch.randn(m.B.shape, generator=gen) * 0.02)
        arrays = adapter_arrays(adapters, dtype=np.float32)
        adapted = _pooled(ft, *_batch(ids, order), (4, 6)).numpy()
    merged = Embedder(weight_deltas=deltas(arrays)).embed_layers(TEXTS, (4, 6))
    np.testing.assert_allclose(merged, adapted, atol=1e-4)
    assert not np.allclose(merged[:, 384:], base.embed(TEXTS), atol=1e-3)


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
    np.testing.assert_allclose(Embedder().embed(TEXTS), before, atol=1e-5)  # same as a fresh, plain model
    assert not np.allclose(safety_clf.embedder.embed(TEXTS), before, atol=1e-3)
