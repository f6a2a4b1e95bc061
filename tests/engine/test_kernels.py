"""Weight formats and kernels: the properties the engine's defaults rely on."""

import pytest
import torch

from libs.engine import SamplingParams
from libs.engine.kernels import DualWeight, linear, measure, quantize_int8
from libs.engine.model import AttnBatch, LlamaModel
from libs.engine.weights import convert, load_weights
from tests.engine.conftest import CACHE_DIR, make_engine
from tests.engine.helpers import drive, make_request


def _weights() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(256, 576, generator=g) * 0.05, torch.randn(70, 576, generator=g)


@pytest.fixture(scope="module")
def slice_rows() -> int | None:
    return measure(reps=1).slice_rows


@pytest.mark.parametrize("kind", ["bf16", "int8"])
def test_a_rows_result_does_not_depend_on_how_many_rows_share_the_call(kind, slice_rows):
    # Replays and prefix-cache hits recompute a token in a batch of another size; with these
    # kernels (bf16 sliced as measured on this CPU) the result is bit-identical, so greedy
    # output cannot drift.
    w, x = _weights()
    q, s = quantize_int8(w)
    weight = DualWeight(w.to(torch.bfloat16), q, s)
    small = kind == "int8"
    alone = linear(x[3:4], weight, small)
    for rows in (4, 9, 33, 70):
        assert torch.equal(linear(x[:rows], weight, small, slice_rows=slice_rows)[3:4], alone), rows
        # Generated rows ahead of the prompt rows may share a larger product; prompt rows not.
        got = linear(x[:rows], weight, small, slice_rows=slice_rows, free_rows=2)
        assert torch.equal(got[3:4], alone), rows


def test_invariance_is_measured_not_assumed():
    # On this CPU either every row count is invariant, or only small calls are and the engine
    # slices; a product of more rows than the slice must then really differ somewhere, or the
    # slicing would be wasted work.
    w = torch.randn(3072, 576, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16) * 0.05
    cal = measure(reps=1)
    if cal.slice_rows is None:
        pytest.skip("bf16 products are row-invariant at every size on this CPU (no AMX)")
    x = torch.randn(300, 576)
    alone = torch.cat([linear(x[i : i + 1], w, False) for i in range(40)])
    assert not all(torch.equal(linear(x[:n], w, False)[:40], alone) for n in (64, 128, 300))


def test_int8_and_bf16_stay_close_to_fp32():
    w, x = _weights()
    ref = x @ w.T
    q, s = quantize_int8(w)
    for small in (True, False):
        got = linear(x, DualWeight(w.to(torch.bfloat16), q, s), small)
        assert (got - ref).abs().max() / ref.abs().max() < 0.02


def test_measure_reports_every_format_and_a_choice():
    cal = measure(hidden=64, out=128, rows=(1, 2, 4), reps=2)
    assert set(cal.us) == {"fp32", "bf16", "int8"} and all(len(v) == 3 for v in cal.us.values())
    assert cal.int8_max_rows in (0, 1, 2, 4)
    assert cal.best_dtype() in ("hybrid", "int8")


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
    model.int8_max_rows = 4
    model.slice_rows = measure(reps=1).slice_rows
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
    got = LlamaModel._decode_attention(q, k.bfloat16(), v.bfloat16(), batch)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert (got - ref).abs().max() < 0.05


@pytest.mark.slow
def test_a_prompt_recomputed_from_its_last_token_gets_the_same_logits(model_path, tokenizer):
    # The harshest split a replay meets: everything but the last prompt token comes from the
    # cache (full blocks and the tail the first run left), so that token is a one-row chunk.
    cfg, tensors = load_weights(model_path, "hybrid", CACHE_DIR)
    model = LlamaModel(cfg, tensors, "hybrid")
    model.slice_rows = measure(reps=1).slice_rows
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
