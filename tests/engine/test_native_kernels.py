"""The native kernels (switchyard/libs/engine/native) against torch references, their batch invariance, and
the engine's greedy tokens with them.

Tolerances: against the product of the *quantized* activations with the weights' exact values
(fp64), the kernels differ only by fp32 summation order: 1e-5 of the largest output. Against
fp32 activations, quantizing them to 8 bits per block of 32 costs up to about 1 % of the largest
output on random data; the tests bound it at 2 %.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from switchyard.libs.engine import SamplingParams, native
from switchyard.libs.engine.kernels import BlockWeight, Calibration, linear, pack_blocks, quantize_q8_0
from switchyard.libs.engine.model import AttnBatch, KVCache, LlamaModel, PrefillSpan, prefill_mask
from switchyard.libs.engine.weights import convert, load_weights, read_gguf
from tests.engine.conftest import CACHE_DIR, make_engine

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


def _quantized_rows(x: torch.Tensor) -> torch.Tensor:
    """Reference: each row's blocks of 32 rounded to int8 steps of amax / 127, dequantized."""
    m, k = x.shape
    xb = x.reshape(m, k // 32, 32)
    amax = xb.abs().amax(-1, keepdim=True)
    q = torch.round(xb * torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax)))
    return (q * (amax / 127.0)).reshape(m, k)


def _q4(n: int, k: int, q4_0: bool = False, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    # fp16 values, as a GGUF stores its scales
    d = (torch.rand(n, k // 32, generator=g) * 0.01 + 0.001).half().float()
    m = -8 * d if q4_0 else (-torch.rand(n, k // 32, generator=g) * 0.08).half().float()
    dense = (q.view(n, k // 32, 32).float() * d[..., None] + m[..., None]).view(n, k)
    return q, torch.stack([d, m], -1), dense


def _check(got: torch.Tensor, x: torch.Tensor, dense: torch.Tensor) -> None:
    # The kernel's own quantized activations (checked against the reference separately), so that
    # the bound sees summation order only, not a rare value the two roundings put a step apart.
    q, d, _ = native.quantize_rows(x)
    xq = (q.view(x.shape[0], -1, 32).float() * d[..., None]).view(x.shape)
    exact = (xq.double() @ dense.double().T).float()
    scale = exact.abs().max()
    assert got.dtype == torch.float32 and got.shape == exact.shape
    assert (got - exact).abs().max() <= 1e-5 * scale
    assert (got - x @ dense.T).abs().max() <= 0.02 * scale


def test_activation_quantization_matches_the_reference():
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(3)) * torch.linspace(0.1, 10, 576)
    x[2, :32] = 0  # an all-zero block: scale 0, values 0
    q, d, s = native.quantize_rows(x)
    amax = x.view(64, 18, 32).abs().amax(-1)
    assert torch.equal(d, amax / 127.0)
    # torch may divide by a reciprocal: a value at a rounding tie can land one step away, rarely
    step = (q.view(64, 18, 32).float() * d[..., None] - _quantized_rows(x).view(64, 18, 32)) / d[..., None].clamp(
        min=1e-30
    )
    assert step.abs().max() <= 1 and (step != 0).float().mean() < 1e-3
    assert torch.allclose(s, d * q.view(64, 18, 32).sum(-1).float(), rtol=1e-6)
    assert d[2, 0] == 0 and not q[2, :32].any()


@pytest.mark.parametrize("q4_0", [False, True], ids=["q4_1", "q4_0"])
@pytest.mark.parametrize("rows", [1, 3, 4, 9, 16, 40])
@pytest.mark.parametrize("n", [96, 100], ids=["x8", "rows"])
def test_q4_product_matches_the_reference(q4_0, rows, n):
    q, dm, dense = _q4(n, 576, q4_0)
    w = pack_blocks({"w.q4": q, "w.q4dm": dm}, "w")
    assert isinstance(w, BlockWeight) and w.values.numel() == n * 288 and w.x8 == (n % 8 == 0)
    x = torch.randn(rows, 576, generator=torch.Generator().manual_seed(rows))
    _check(linear(x, w, True), x, dense)


def test_scales_that_are_not_fp16_values_keep_the_plain_layout():
    q, dm, dense = _q4(96, 576)
    dm = dm + 1e-7  # no longer fp16 values: the interleaved layout would round them
    w = pack_blocks({"w.q4": q, "w.q4dm": dm}, "w")
    assert isinstance(w, BlockWeight) and not w.x8 and w.d.dtype == torch.float32
    x = torch.randn(4, 576, generator=torch.Generator().manual_seed(1))
    _check(linear(x, w, True), x, dense + 1e-7)


@pytest.mark.parametrize("rows", [1, 2, 5, 16])
def test_q8_product_matches_the_reference(rows):
    dense = torch.randn(200, 1536) * 0.05
    qs, d = quantize_q8_0(dense)
    blocked = (qs.view(200, 48, 32).float() * d[..., None]).view(200, 1536)
    assert (blocked - dense).abs().max() <= d.max() / 2 + 1e-7  # Q8_0 rounds to half a step
    w = pack_blocks({"w.q8": qs, "w.q8d": d}, "w")
    x = torch.randn(rows, 1536, generator=torch.Generator().manual_seed(rows))
    _check(linear(x, w, True), x, blocked)


@pytest.mark.parametrize("rows", [1, 5, 12, 17, 40])
def test_interleaved_q8_product_matches_the_reference_on_every_kernel(rows):
    # fp16 scales, as a GGUF's: the interleaved layout (the output head's). 104 columns: an odd last
    # group, which the VNNI rows serve beside the AMX tiles.
    dense = torch.randn(104, 1536, generator=torch.Generator().manual_seed(7)) * 0.05
    qs, d = quantize_q8_0(dense)
    d = d.half().float()
    blocked = (qs.view(104, 48, 32).float() * d[..., None]).view(104, 1536)
    w = pack_blocks({"w.q8": qs, "w.q8d": d}, "w")
    assert isinstance(w, BlockWeight) and w.x8 and w.m is None and w.d.dtype == torch.float16
    x = torch.randn(rows, 1536, generator=torch.Generator().manual_seed(rows)) * 2
    got = linear(x, w, True)
    _check(got, x, blocked)
    # Every kernel sums each column's block exactly and scales it once: the same bits.
    try:
        native.use_amx(False)
        assert torch.equal(linear(x, w, True), got)
        native.use_vnni(False)
        assert torch.equal(linear(x, w, True), got)
    finally:
        native.use_vnni(True)
        native.use_amx(True)
    assert torch.equal(torch.cat([linear(x[i : i + 1], w, True) for i in range(rows)]), got)


def test_packing_keeps_ggml_nibble_order():
    q = torch.arange(64, dtype=torch.uint8).remainder(16).view(1, 64)
    packed = native.pack_q4(q)
    assert packed.shape == (1, 32)
    assert torch.equal(packed[0, :16] & 0xF, q[0, :16]) and torch.equal(packed[0, :16] >> 4, q[0, 16:32])


def test_a_row_gets_the_same_bits_alone_in_any_batch_and_thread_count():
    q, dm, _ = _q4(304, 576, seed=1)
    w4 = pack_blocks({"w.q4": q, "w.q4dm": dm}, "w")
    w4rows = pack_blocks({"w.q4": q[:300], "w.q4dm": dm[:300]}, "w")
    qs, d = quantize_q8_0(torch.randn(260, 576))
    w8 = pack_blocks({"w.q8": qs, "w.q8d": d}, "w")
    w8x8 = pack_blocks({"w.q8": qs[:256], "w.q8d": d[:256].half().float()}, "w")
    assert w8 is not None and not w8.x8 and w8x8 is not None and w8x8.x8
    x = torch.randn(17, 576)
    threads = torch.get_num_threads()
    try:
        for w in (w4, w4rows, w8, w8x8):
            assert w is not None
            torch.set_num_threads(1)
            alone = torch.cat([linear(x[i : i + 1], w, True) for i in range(17)])
            torch.set_num_threads(max(2, threads))
            for rows in (1, 2, 3, 4, 5, 7, 8, 16, 17):
                # the row set shifted, so every row lands in every position of a row group
                for start in (0, 17 - rows):
                    got = linear(x[start : start + rows], w, True)
                    assert torch.equal(got, alone[start : start + rows]), (rows, start)
    finally:
        torch.set_num_threads(threads)


def test_best_dtype_picks_native_where_its_kernels_win():
    us = {
        "fp32": {1: 260.0, 32: 1349.0},
        "bf16": {1: 266.0, 32: 7717.0},
        "int8": {1: 97.0, 32: 1431.0},
        "int4": {1: 139.0, 32: 1714.0},
    }
    assert Calibration(us, 0).best_dtype() == "int8"
    assert Calibration({**us, "native": {1: 60.0, 32: 900.0}}, 0).best_dtype() == "native"
    assert Calibration({**us, "native": {1: 120.0, 32: 900.0}}, 0).best_dtype() == "int8"
    assert Calibration({**us, "native": {1: 60.0, 32: 1500.0}}, 0).best_dtype() == "int8"
    # AMX: bf16 tiles win the lone product, but native won the engine's steps end to end.
    amx = {**us, "bf16": {1: 129.0, 32: 157.0}, "native": {1: 60.0, 32: 900.0}}
    assert Calibration(amx, 0).best_dtype() == "native"
    # Without native kernels, bf16 winning batched products picks hybrid.
    assert Calibration({k: v for k, v in amx.items() if k != "native"}, 0).best_dtype() == "hybrid"
    # AVX-512 VNNI (measured on an EPYC): native beats everything at both ends
    vnni = {**us, "bf16": {1: 80.0, 32: 568.0}, "native": {1: 29.0, 32: 372.0}}
    assert Calibration(vnni, 0).best_dtype() == "native"
    assert Calibration({**vnni, "native": {1: 29.0, 32: 1600.0}}, 0).best_dtype() == "hybrid"


def test_the_gguf_q8_blocks_decode_to_the_dequantized_matrix(model_path):
    _, t = read_gguf(model_path)
    q, d = t["token_embd.weight.q8"], t["token_embd.weight.q8d"]
    n, k = q.shape
    assert torch.equal((q.view(n, k // 32, 32).float() * d[..., None]).view(n, k), t["token_embd.weight"])
    nat = convert(t, "native")
    # every matrix keeps its GGUF blocks and nothing else; the tied head shares the embedding's
    assert "blk.0.ffn_down.weight.q4" in nat and "blk.0.ffn_down.weight.q" not in nat
    assert "blk.0.ffn_down.weight" not in nat
    assert torch.equal(nat["output.weight.q8"], q)
    assert not any(n.endswith((".q8", ".q8d")) for n in convert(t, "hybrid"))


PROMPTS = ["Write a haiku about the sea.", "Describe the water cycle.", "Explain how a bicycle works."]
# Quantizing activations to 8 bits moves logits by about as much as int8 weights do (up to ~0.7
# here): greedy text with either follows fp32 until a near-tie, where it may take the other word.
# Which near-tie flips depends on the CPU's fp32 kernels (the haiku's first word is a 0.11 tie
# that flipped on an AVX-512 EPYC and not on an AVX2 one). So where the texts part, fp32 itself
# must have rated the native engine's word within NEAR_TIE of its own; a wrong kernel parts at
# once by far more.
NEAR_TIE = 0.5


async def _greedy(eng, prompts: list[list[int]], together: bool, n: int = 16) -> list[list[int]]:
    async def one(rid: str, ids: list[int]) -> list[int]:
        got: list[int] = []
        async for c in eng.generate(rid, ids, SamplingParams(max_tokens=n, ignore_eos=True)):
            got += c.token_ids
        return got

    if together:
        return list(await asyncio.gather(*(one(f"t{i}", ids) for i, ids in enumerate(prompts))))
    return [await one(f"a{i}", ids) for i, ids in enumerate(prompts)]


def _last_logits(model: LlamaModel, ids: list[int]) -> torch.Tensor:
    """The model's next-token logits after `ids`, as one prompt chunk in a fresh cache."""
    n = len(ids)
    kv = KVCache(model.cfg, -(-n // 16), 16, model.kv_dtype)
    span = PrefillSpan(0, n, 0, torch.empty(0, dtype=torch.long), prefill_mask(0, n))
    batch = AttnBatch(torch.tensor(ids), torch.arange(n), torch.arange(n), 0, None, None, [span], torch.tensor([n - 1]))
    with torch.inference_mode():
        return model.forward(batch, kv)[0]


@pytest.mark.slow
async def test_engine_greedy_tokens_with_native_kernels(model_path, tokenizer, fp32_model):
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}])) for q in PROMPTS]
    cfg, tensors = load_weights(model_path, "native", CACHE_DIR)
    model = LlamaModel(cfg, tensors, "native").pack_cpu_weights()
    layer = model.layers[0]
    assert all(isinstance(w, BlockWeight) for w in (layer.qkv, layer.o, layer.gate_up, layer.down, model.lm_head))
    eng = make_engine(model, num_blocks=96)
    ref = make_engine(fp32_model, num_blocks=96)
    await eng.start()
    await ref.start()
    try:
        alone = await _greedy(eng, prompts, together=False)
        together = await _greedy(eng, prompts, together=True)
        want = await _greedy(ref, prompts, together=False)
    finally:
        await eng.stop()
        await ref.stop()
    # decode rows multiplied alone or beside the other sequences: the same tokens
    assert together == alone
    for ids, got, ref_tokens in zip(prompts, alone, want, strict=True):
        part = next((i for i, (a, b) in enumerate(zip(got, ref_tokens, strict=False)) if a != b), None)
        if part is not None:
            logits = _last_logits(fp32_model, ids + ref_tokens[:part])
            assert logits[ref_tokens[part]] - logits[got[part]] < NEAR_TIE, (part, got, ref_tokens)


def test_convert_makes_blocks_for_unquantized_matrices():
    t = {"token_embd.weight": torch.randn(10, 64), "output_norm.weight": torch.ones(64)}
    t["blk.0.ffn_down.weight"] = torch.randn(64, 96)
    t["blk.0.odd.weight"] = torch.randn(8, 40)  # not a multiple of 32 wide: int8
    nat = convert(t, "native")
    assert nat["blk.0.ffn_down.weight.q8"].dtype == torch.int8 and nat["blk.0.ffn_down.weight.q8d"].shape == (64, 3)
    assert nat["output.weight.q8"].shape == (10, 64)  # the tied head
    assert nat["blk.0.odd.weight.q"].dtype == torch.int8 and "blk.0.odd.weight.q8" not in nat


@pytest.mark.slow
async def test_native_prompt_whole_chunked_or_cached_gives_the_same_tokens(model_path, tokenizer):
    """Prompt rows take the native kernels too: a prompt computed whole, in chunks, or mostly
    from the cache gives its rows the same bits, so a replay recomputes exactly."""
    cfg, tensors = load_weights(model_path, "native", CACHE_DIR)
    model = LlamaModel(cfg, tensors, "native")
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "Name three rivers."}]))
    runs = []
    for chunk in (512, 7):  # whole, then in chunks of 7 tokens
        eng = make_engine(model, num_blocks=64, max_num_batched_tokens=chunk)
        await eng.start()
        try:
            out = []
            for i in range(2):  # the second run reads the prompt from the prefix cache
                ids, cached = [], 0
                async for c in eng.generate(f"r{i}", prompt, SamplingParams(max_tokens=12, ignore_eos=True)):
                    ids += c.token_ids
                    if c.finished and c.usage is not None:
                        cached = c.usage.cached_tokens
                out.append((ids, cached))
        finally:
            await eng.stop()
        assert out[0][1] == 0 and out[1][1] > 0
        runs += [o[0] for o in out]
    assert all(r == runs[0] for r in runs) and len(runs[0]) == 12


@pytest.mark.skipif(not native.has_amx(), reason="no AMX-INT8 tiles on this CPU")
@pytest.mark.parametrize("n, k", [(96, 576), (104, 1536)], ids=["even-groups", "odd-groups"])
def test_amx_tiles_give_the_vnni_kernels_bits(n, k):
    # The tiles sum the same integers exactly and the epilogue runs the same float operations, so a
    # row count that switches kernels changes no bit. 104 columns: an odd last group of 8 columns,
    # which the VNNI rows serve beside the tiles; 17 and 40 rows: a last tile of padding.
    q, dm, dense = _q4(n, k, seed=n)
    w = pack_blocks({"w.q4": q, "w.q4dm": dm}, "w")
    assert isinstance(w, BlockWeight) and w.x8
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(k)) * 3
    try:
        for rows in (12, 15, 16, 17, 40):
            assert native.use_amx(True) and native.amx_on()
            tiles = linear(x[:rows], w, True)
            assert not native.use_amx(False)
            assert torch.equal(tiles, linear(x[:rows], w, True)), rows
            _check(tiles, x[:rows], dense)
    finally:
        native.use_amx(True)
