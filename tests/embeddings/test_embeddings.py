import numpy as np
import pytest

from switchyard.libs.embeddings import MAX_TOKENS, Embedder, get_embedder, model_dir
from switchyard.libs.embeddings.model import auto_dtype, cpu_flags, native_bf16


@pytest.fixture(scope="module")
def embedder():
    return get_embedder()


def test_model_is_bundled() -> None:
    assert (model_dir() / "model.safetensors").is_file()


def test_cached_instance(embedder) -> None:
    assert get_embedder() is embedder


def test_shape_dtype_and_norm(embedder) -> None:
    texts = ["hello", "a somewhat longer sentence about shipping", "x " * 2000]
    v = embedder.embed(texts)
    assert v.shape == (3, 384) == (len(texts), embedder.dim)
    assert v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)
    assert MAX_TOKENS == 256


def test_order_and_batching_independent(embedder) -> None:
    texts = [f"message number {i} about {'cats' if i % 2 else 'invoices'}" for i in range(70)]
    whole = embedder.embed(texts)
    single = np.vstack([embedder.embed([t]) for t in texts[:5]])
    # In bf16 a batch's padding changes which kernel blocks (AMX tiles) a row is summed in: the rounding
    # differs, not the meaning. fp32 is held to the bit-near figure.
    atol = 2e-3 if embedder.dtype == "bf16" else 1e-5
    np.testing.assert_allclose(whole[:5], single, atol=atol)
    assert ((whole[:5] * single).sum(axis=1) > 0.9999).all()


def test_similar_closer_than_unrelated(embedder) -> None:
    a, b, c = embedder.embed(
        [
            "How do I return a damaged item for a refund?",
            "My package arrived broken, can I get my money back?",
            "What is the boiling point of water on a mountain?",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2
    assert float(a @ b) > float(b @ c) + 0.2


def test_embed_layers_concatenates_pooled_layers(embedder) -> None:
    texts = ["How do I return a damaged item?", "short", "x " * 400]
    last = embedder.embed_layers(texts, (embedder.n_layers,))
    np.testing.assert_allclose(last, embedder.embed(texts), atol=1e-6)
    both = embedder.embed_layers(texts, (4, embedder.n_layers))
    assert both.shape == (3, 2 * embedder.dim) and both.dtype == np.float32
    np.testing.assert_allclose(both[:, embedder.dim :], last, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(both[:, : embedder.dim], axis=1), 1.0, atol=1e-5)
    assert not np.allclose(both[:, : embedder.dim], last, atol=1e-2)  # layer 4 is not layer 6
    assert embedder.embed_layers([], (4, 6)).shape == (0, 2 * embedder.dim)
    with pytest.raises(ValueError):
        embedder.embed_layers(texts, (embedder.n_layers + 1,))


# /proc/cpuinfo flags of the CPU classes the services run on (abridged to what decides).
AMX = frozenset("avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8 amx_tile".split())
AVX512_BF16 = frozenset("avx2 avx512f avx512_vnni avx512_bf16".split())  # e.g. Zen 4
AVX512_VNNI = frozenset("avx2 avx512f avx512bw avx512_vnni".split())  # e.g. Cascade Lake
AVX2 = frozenset("sse4_2 avx fma avx2".split())  # e.g. Zen 2, Skylake client


def test_auto_dtype_per_cpu_class() -> None:
    # bf16 where the CPU multiplies it natively, fp32 elsewhere; int8 only when asked for (docs/safety.md).
    assert auto_dtype(AMX) == auto_dtype(AVX512_BF16) == "bf16"
    assert auto_dtype(AVX512_VNNI) == auto_dtype(AVX2) == auto_dtype(frozenset()) == "fp32"
    assert native_bf16(AMX) and not native_bf16(AVX512_VNNI)


def test_auto_is_this_cpus_choice(embedder) -> None:
    assert embedder.dtype == auto_dtype(cpu_flags()) and "avx2" in cpu_flags()


def test_unknown_dtype_refused_before_loading() -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        Embedder(dtype="int4")


@pytest.mark.parametrize("exit_layer", [1, 2, 3])
def test_a_split_pass_gives_the_whole_pass_features_for_the_rows_that_go_on(embedder, exit_layer: int) -> None:
    texts = [f"message {i} " + "about the weather and the river " * (i % 5) for i in range(40)] + ["x " * 400]
    layers = (0, 4, embedder.n_layers)
    whole = embedder.embed_layers(texts, layers)
    seen: list[tuple[np.ndarray, list[int]]] = []

    def go_on(pooled: np.ndarray, idx: list[int]) -> np.ndarray:
        seen.append((pooled, idx))
        return np.array([i % 3 != 0 for i in idx])

    got, went_on = embedder.embed_layers_split(texts, layers, exit_layer, go_on)
    assert list(np.flatnonzero(went_on)) == [i for i in range(len(texts)) if i % 3 != 0]
    # The rows that go on are cut to their own longest row's width: in bf16 that may move rounding only.
    atol = 2e-3 if embedder.dtype == "bf16" else 1e-5
    np.testing.assert_allclose(got[went_on], whole[went_on], atol=atol)
    assert not got[~went_on].any()
    # The screen was shown each text's pooled layers 0 and exit_layer, once.
    idx = [i for _, ix in seen for i in ix]
    assert sorted(idx) == list(range(len(texts)))
    pooled = np.vstack([p for p, _ in seen])[np.argsort(idx)]
    np.testing.assert_allclose(pooled, embedder.embed_layers(texts, (0, exit_layer)), atol=atol)


def test_a_split_pass_where_nothing_goes_on_runs_only_the_first_layers(embedder) -> None:
    got, went_on = embedder.embed_layers_split(["a", "b"], (4, 6), 2, lambda p, idx: np.zeros(len(idx), bool))
    assert not went_on.any() and not got.any() and got.shape == (2, 2 * embedder.dim)
    with pytest.raises(ValueError):
        embedder.embed_layers_split(["a"], (4, 6), embedder.n_layers, lambda p, idx: np.ones(len(idx), bool))


def test_a_split_pass_in_fp32_matches_too() -> None:
    e = Embedder(dtype="fp32")
    texts = ["How do I return a damaged item for a refund?", "short", "x " * 300, "Water the tomatoes."]
    whole = e.embed_layers(texts, (4, 6))
    got, went_on = e.embed_layers_split(texts, (4, 6), 3, lambda p, idx: np.array([len(texts[i]) > 5 for i in idx]))
    np.testing.assert_allclose(got[went_on], whole[went_on], atol=1e-5)
    assert list(went_on) == [True, False, True, True]
