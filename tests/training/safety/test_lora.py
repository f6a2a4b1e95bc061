"""LoRA adapters: an untrained adapter changes nothing, and the stored adapters merge into the weights
the runtime classifier loads (``switchyard.libs.safety.classifier.adapter_deltas``) exactly."""

import numpy as np

from switchyard.libs.embeddings import Embedder
from switchyard.libs.safety.classifier import adapter_deltas
from training.safety.lora import adapter_arrays, add_lora

TEXTS = ["How do I return a damaged item for a refund?", "short", "What is the boiling point of water?"]


def test_lora_starts_as_identity_and_merges_exactly() -> None:
    import torch

    from training.safety.train import _batch, _pooled, tokenize

    base = Embedder(dtype="fp32")
    ids = tokenize(TEXTS)
    order = list(range(len(TEXTS)))
    ft = Embedder(dtype="fp32")._model  # a private copy to wrap
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
    merged = Embedder(weight_deltas=adapter_deltas(arrays), dtype="fp32").embed_layers(TEXTS, (4, 6))
    np.testing.assert_allclose(merged, adapted, atol=1e-4)
    assert not np.allclose(merged[:, 384:], base.embed(TEXTS), atol=1e-3)
