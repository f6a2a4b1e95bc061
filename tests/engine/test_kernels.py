"""Weight formats and kernels: the properties the engine's defaults rely on."""

import pytest
import torch

from switchyard.libs.engine import SamplingParams
from switchyard.libs.engine.kernels import (
    DualWeight,
    RowInvariance,
    linear,
    measure,
    pack_dense,
    pack_int4,
    quantize_int8,
    row_invariance,
    tiled,
)
from switchyard.libs.engine.model import AttnBatch, LlamaModel, PrefillSpan, prefill_mask
from switchyard.libs.engine.weights import convert, load_weights, read_gguf
from tests.engine.conftest import CACHE_DIR, make_engine
from tests.engine.helpers import drive, make_request

# (out, in) of SmolLM2-135M's layer products
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]


def _weights(k: int = 576) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(256, k, generator=g) * 0.05, torch.randn(70, k, generator=g)


@pytest.fixture(scope="module")
def inv() -> RowInvariance:
    return row_invariance(SHAPES)


def _q4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w rounded to Q4_1-style blocks of 32: values, (d, m) per block, and the matrix they encode."""
    n, k = w.shape
    g = w.view(n, k // 32, 32)
    lo, hi = g.amin(-1), g.amax(-1)
    d = ((hi - lo) / 15).clamp(min=1e-6).half().float()
    m = lo.half().float()
    q = torch.round((g - m[..., None]) / d[..., None]).clamp(0, 15)
    return q.to(torch.uint8).view(n, k), torch.stack([d, m], -1), (q * d[..., None] + m[..., None]).view(n, k)


@pytest.mark.parametrize("kind", ["bf16", "int8", "int4"])
def test_a_rows_result_does_not_depend_on_how_many_rows_share_the_call(kind, inv):
    # Replays and prefix-cache hits recompute a token in a batch of another size; with these
    # kernels (bf16 sliced as measured on this CPU) the result is bit-identical, so greedy
    # output cannot drift.
    for k in (576, 1536):  # both input widths of the model's products (they behave differently)
        w, x = _weights(k)
        q4, dm, _ = _q4(w)
        weight = DualWeight(w.to(torch.bfloat16), pack_int4(q4, dm) if kind == "int4" else quantize_int8(w))
        small = kind != "bf16"
        alone = linear(x[3:4], weight, small, inv=inv)
        for rows in (4, 9, 33, 70):
            assert torch.equal(linear(x[:rows], weight, small, inv=inv)[3:4], alone), (k, rows)
            # Generated rows ahead of the prompt rows may share a larger product; prompt rows not.
            got = linear(x[:rows], weight, small, inv=inv, free_rows=2)
            assert torch.equal(got[3:4], alone), (k, rows)


def test_invariance_is_measured_not_assumed(inv):
    # The measured range is needed, not just safe: below its minimum, or above its maximum, some
    # product of the model's shapes really gives rows other bits, or the padding or slicing
    # would be wasted work.
    if inv == RowInvariance(1, None):
        pytest.skip("bf16 products are row-invariant at every size on this CPU")
    counts = list(range(1, inv.min_rows)) + ([64, 128, 300] if inv.max_rows else [])
    differs = False
    for out, k in SHAPES:
        w = (torch.randn(out, k, generator=torch.Generator().manual_seed(3)) * 0.05).to(torch.bfloat16)
        x = torch.randn(300, k, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
        ref = tiled(x, w, inv.min_rows)
        differs |= any(not torch.equal(tiled(x, w, n), ref) for n in counts)
    assert differs


def test_a_packed_bf16_matrix_gives_the_bits_of_the_plain_one():
    # pack_dense only changes the memory layout: every row count gets F.linear's exact result.
    w, x = _weights(1536)
    wb = w.to(torch.bfloat16)
    packed = pack_dense(wb)
    if packed is wb:
        pytest.skip("oneDNN cannot reorder bf16 weights on this CPU")
    for rows in (1, 2, 7, 8, 33, 70):
        assert torch.equal(linear(x[:rows], packed, False, keep=True), linear(x[:rows], wb, False, keep=True)), rows


def test_int8_and_bf16_stay_close_to_fp32():
    w, x = _weights()
    ref = x @ w.T
    for small in (True, False):
        got = linear(x, DualWeight(w.to(torch.bfloat16), quantize_int8(w)), small)
        assert (got - ref).abs().max() / ref.abs().max() < 0.02


def test_int4_multiplies_by_exactly_the_matrix_its_blocks_encode():
    # Q4 blocks map onto the kernel's (scale, zero) groups without re-quantizing: the only
    # error left is bf16 (activations, scales and the zero m + 8d), far below a 4-bit step.
    w, x = _weights()
    q4, dm, w4 = _q4(w)
    ref = x @ w4.T
    got = linear(x, pack_int4(q4, dm), True)
    assert got.dtype == torch.float32
    assert (got - ref).abs().max() / ref.abs().max() < 0.01
    assert (got - x @ w.T).abs().max() / ref.abs().max() > 0.01  # rounding to 4 bits is visible


def test_the_gguf_4bit_blocks_decode_to_the_dequantized_matrix(model_path):
    _, t = read_gguf(model_path)
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.7.ffn_down.weight"):
        q, dm = t[name + ".q4"], t[name + ".q4dm"]
        n, k = q.shape
        decoded = (q.view(n, k // 32, 32).float() * dm[..., :1] + dm[..., 1:]).view(n, k)
        assert torch.equal(decoded, t[name]), name  # attn_q/attn_k: the row permutation applies alike
    assert "token_embd.weight.q4" not in t  # Q8_0: no 4-bit blocks, hybrid keeps int8 for it
    hy = convert(t, "hybrid")
    assert "blk.0.ffn_down.weight.q4" in hy and "blk.0.ffn_down.weight.q" not in hy
    assert hy["output.weight.q"].dtype == torch.int8
    assert not any(n.endswith((".q4", ".q4dm")) for n in convert(t, "int8"))


def test_measure_reports_every_format_and_a_choice():
    cal = measure(hidden=64, out=128, rows=(1, 2, 4), reps=2)
    # 'native' only where the native kernels build and run (tests/engine/test_native_kernels.py)
    assert set(cal.us) - {"native"} == {"fp32", "bf16", "int8", "int4"} and all(len(v) == 3 for v in cal.us.values())
    assert cal.small_max_rows in (0, 1, 2, 4)
    assert cal.best_dtype() in ("hybrid", "int8", "native")


def test_convert_formats():
    t = {
        "token_embd.weight": torch.randn(10, 8),
        "output_norm.weight": torch.ones(8),
        "blk.0.ffn_down.weight": torch.randn(8, 16),
    }
    bf = convert(t, "bf16")
    assert bf["blk.0.ffn_down.weight"].dtype == torch.bfloat16 and bf["output_norm.weight"].dtype == torch.float32
    assert bf["output.weight"].dtype == torch.bfloat16  # a tied head gets its own copy
    hy = convert(t, "hybrid")
    assert hy["blk.0.ffn_down.weight.q"].dtype == torch.int8 and "blk.0.ffn_down.weight" in hy
    assert "output.weight" not in convert(t, "fp32")
    with pytest.raises(ValueError, match="unknown weight format"):
        convert(t, "fp8")


@pytest.mark.slow
async def test_hybrid_prompt_from_the_prefix_cache_gives_the_same_tokens(model_path, tokenizer):
    cfg, tensors = load_weights(model_path, "hybrid", CACHE_DIR)
    model = LlamaModel(cfg, tensors, "hybrid")
    model.small_max_rows = 4
    model.invariance = row_invariance(model.matrix_shapes())
    eng = make_engine(model, num_blocks=64)
    assert eng.runner.kv.k.dtype == torch.bfloat16  # the cache follows bf16 products
    await eng.start()
    try:
        prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "Name three rivers."}]))
        runs = []
        for i in range(2):
            ids, cached = [], 0
            async for c in eng.generate(f"r{i}", prompt, SamplingParams(max_tokens=16)):
                ids += c.token_ids
                if c.finished:
                    cached = c.usage.cached_tokens
            runs.append((ids, cached))
        assert runs[0][1] == 0 and runs[1][1] > 0
        assert runs[1][0] == runs[0][0] and len(runs[0][0]) > 4
    finally:
        await eng.stop()


def test_decode_attention_on_a_bf16_cache_stays_close_to_fp32():
    g = torch.Generator().manual_seed(4)
    nkv, slots, hd, bd, width = 3, 64, 16, 2, 32
    k, v = torch.randn(nkv, slots, hd, generator=g), torch.randn(nkv, slots, hd, generator=g)
    q = torch.randn(bd, 9, hd, generator=g)
    lens = torch.tensor([20, 32])
    bias = torch.zeros(bd, width).masked_fill_(torch.arange(width) >= lens[:, None], float("-inf"))
    batch = AttnBatch(
        torch.zeros(bd, dtype=torch.long),
        lens - 1,
        lens - 1,
        bd,
        torch.arange(bd * width) % slots,
        bias.view(1, bd, 1, width),
        [],
        torch.arange(bd),
        bd,
    )
    ref = LlamaModel._decode_attention(q, k, v, batch)
    for fused in (True, False):  # bf16 SDPA, or fp32 matmuls over upcast keys (measured at load)
        got = LlamaModel._decode_attention(q, k.bfloat16(), v.bfloat16(), batch, fused)
        assert got.dtype == torch.float32 and got.shape == ref.shape
        assert (got - ref).abs().max() < 0.05


@pytest.mark.parametrize("length", [33, 34, 35, 40, 66, 97])
def test_a_prompt_rows_attention_does_not_depend_on_how_the_prompt_was_chunked(length):
    # fp32 SDPA multiplies up to 32 query rows as one product, and a block of only a few rows
    # takes another path: lengths of 1-3 past a multiple of 32 broke replays before the slicing.
    g = torch.Generator().manual_seed(length)
    nh, nkv, hd = 9, 3, 64
    q = torch.randn(length, nh, hd, generator=g)
    k = torch.randn(length, nkv, hd, generator=g).bfloat16()
    v = torch.randn(length, nkv, hd, generator=g).bfloat16()
    kc, vc = k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()  # the cache: slot = position

    def attend(start: int) -> torch.Tensor:
        n = length - start
        span = PrefillSpan(
            0, n, start, torch.arange(length) if start else torch.empty(0, dtype=torch.long), prefill_mask(start, n)
        )
        batch = AttnBatch(
            torch.zeros(n, dtype=torch.long),
            torch.arange(start, length),
            torch.arange(start, length),
            0,
            None,
            None,
            [span],
            torch.tensor([n - 1]),
        )
        return LlamaModel._attention(None, q[start:], k[start:], v[start:], kc, vc, batch)  # type: ignore[arg-type]

    whole = attend(0)
    for start in (length - 1, length - 3, length // 2, 5):
        assert torch.equal(attend(start), whole[start:]), start


@pytest.mark.slow
def test_a_prompt_recomputed_from_its_last_token_gets_the_same_logits(model_path, tokenizer):
    # The harshest split a replay meets: everything but the last prompt token comes from the
    # cache (full blocks and the tail the first run left), so that token is a one-row chunk.
    cfg, tensors = load_weights(model_path, "hybrid", CACHE_DIR)
    model = LlamaModel(cfg, tensors, "hybrid").pack_cpu_weights()  # as the engine serves it
    model.invariance = row_invariance(model.matrix_shapes())
    eng = make_engine(model, num_blocks=64)
    logits: list[torch.Tensor] = []
    run = eng.runner.run
    eng.runner.run = lambda seqs: logits.append(run(seqs)) or logits[-1]
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "Name three rivers."}]))
    first = make_request("a", prompt, max_tokens=1)
    drive(eng, [first])
    again = make_request("b", prompt, max_tokens=1)
    drive(eng, [again])
    assert first.cached_tokens == 0 and again.cached_tokens == len(prompt) - 1
    assert torch.equal(logits[0], logits[1])
