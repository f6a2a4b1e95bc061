"""The native layer ops (switchyard/libs/engine/native/layer_ops.cpp) against the torch code they replace, the
row independence of each, and the VNNI products giving the AVX2 products' bits.

Tolerances: the ops compute in fp32 like the torch path, in another summation order; 1e-5 relative
to the largest value (1e-4 for attention, whose softmax goes through exp).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from switchyard.libs.engine import native
from switchyard.libs.engine.kernels import block_mm, pack_blocks
from switchyard.libs.engine.model import AttnBatch, LlamaModel

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


def _close(got: torch.Tensor, ref: torch.Tensor, rel: float = 1e-5) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert (got - ref).abs().max() <= rel * ref.abs().max()


def test_rms_norm_matches_torch_and_each_row_is_alone():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(37, 576, generator=g) * 3, torch.randn(576, generator=g)
    got = native.rms_norm(x, w, 1e-5)
    _close(got, F.rms_norm(x, (576,), w, 1e-5))
    assert torch.equal(native.rms_norm(x[5:6], w, 1e-5), got[5:6])


def _rope_tables(positions: int, hd: int) -> tuple[torch.Tensor, torch.Tensor]:
    half = hd // 2
    freqs = 1.0 / (10000 ** (torch.arange(half).float() / half))
    ang = torch.outer(torch.arange(positions).float(), freqs)
    emb = torch.cat((ang, ang), -1)
    sin = emb.sin()
    return emb.cos(), torch.cat((-sin[:, :half], sin[:, half:]), -1)


def test_rope_store_rotates_q_and_k_and_writes_k_and_v_to_their_slots():
    g = torch.Generator().manual_seed(1)
    nh, nkv, hd, T, S = 9, 3, 64, 5, 40
    cos, sin = _rope_tables(100, hd)
    qkv = torch.randn(T, (nh + 2 * nkv) * hd, generator=g)
    pos, slots = torch.tensor([0, 7, 8, 50, 99]), torch.tensor([3, 17, 0, 39, 21])
    kc, vc = torch.zeros(nkv, S, hd), torch.zeros(nkv, S, hd)
    # The torch path of LlamaModel.forward.
    nqk = (nh + nkv) * hd
    qk = qkv[:, :nqk].view(T, nh + nkv, hd)
    ref_qk = torch.addcmul(qk * cos[pos].unsqueeze(1), qk.roll(hd // 2, -1), sin[pos].unsqueeze(1))
    ref_v = qkv[:, nqk:].view(T, nkv, hd).clone()
    got = qkv.clone()
    native.rope_store(got, cos, sin, pos, kc, vc, slots, nh, nkv)
    _close(got[:, :nqk].view(T, nh + nkv, hd), ref_qk)
    assert torch.equal(got[:, nqk:], qkv[:, nqk:])  # v is not rotated
    assert torch.equal(kc[:, slots], got[:, nh * hd : nqk].view(T, nkv, hd).transpose(0, 1))
    assert torch.equal(vc[:, slots], ref_v.transpose(0, 1))
    untouched = torch.ones(S, dtype=torch.bool)
    untouched[slots] = False
    assert kc[:, untouched].abs().sum() == 0 and vc[:, untouched].abs().sum() == 0


def test_rope_store_into_an_fp16_cache_leaves_the_stored_values_in_qkv():
    g = torch.Generator().manual_seed(6)
    nh, nkv, hd, T, S = 9, 3, 64, 4, 32
    cos, sin = _rope_tables(64, hd)
    qkv = torch.randn(T, (nh + 2 * nkv) * hd, generator=g)
    pos, slots = torch.tensor([1, 2, 30, 63]), torch.tensor([5, 6, 7, 31])
    ref = qkv.clone()
    native.rope_store(ref, cos, sin, pos, torch.zeros(nkv, S, hd), torch.zeros(nkv, S, hd), slots, nh, nkv)
    kc, vc = torch.zeros(nkv, S, hd, dtype=torch.float16), torch.zeros(nkv, S, hd, dtype=torch.float16)
    got = qkv.clone()
    native.rope_store(got, cos, sin, pos, kc, vc, slots, nh, nkv)
    nq, nqk = nh * hd, (nh + nkv) * hd
    assert torch.equal(got[:, :nq], ref[:, :nq])  # q stays fp32
    assert torch.equal(got[:, nq:], ref[:, nq:].half().float())  # k, v: the stored values (RNE, as torch)
    assert torch.equal(kc[:, slots], ref[:, nq:nqk].view(T, nkv, hd).transpose(0, 1).half())
    assert torch.equal(vc[:, slots], ref[:, nqk:].view(T, nkv, hd).transpose(0, 1).half())


def test_rope_store_refuses_a_slot_outside_the_cache():
    kc = torch.zeros(1, 4, 8)
    with pytest.raises(RuntimeError, match="out of range"):
        native.rope_store(
            torch.zeros(1, 24), torch.ones(2, 8), torch.zeros(2, 8), torch.tensor([0]), kc, kc.clone(),
            torch.tensor([4]), 1, 1,
        )  # fmt: skip


def _paged(bd: int, lens: list[int], width: int, slots_total: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    nh, nkv, hd = 9, 3, 64
    kc, vc = torch.randn(nkv, slots_total, hd, generator=g), torch.randn(nkv, slots_total, hd, generator=g)
    slots = torch.stack([torch.randperm(slots_total, generator=g)[:width] for _ in range(bd)])
    q = torch.randn(bd, nh, hd, generator=g)
    return q, kc, vc, slots, torch.tensor(lens)


def test_decode_attention_matches_the_gathering_path_and_rows_are_alone():
    bd, width = 4, 48
    lens = [1, 20, 48, 33]
    q, kc, vc, slots, lens_t = _paged(bd, lens, width, 200, seed=2)
    bias = torch.zeros(bd, width).masked_fill_(torch.arange(width) >= lens_t[:, None], float("-inf"))
    batch = AttnBatch(
        torch.zeros(bd, dtype=torch.long), lens_t - 1, lens_t - 1, bd, slots.reshape(-1),
        bias.view(1, bd, 1, width), [], torch.arange(bd), bd,
    )  # fmt: skip
    ref = LlamaModel._decode_attention(q, kc, vc, batch)
    got = native.decode_attention(q, kc, vc, slots, lens_t)
    _close(got, ref, 1e-4)
    # A row alone, with the others' keys gone, gets the same bits.
    alone = native.decode_attention(q[2:3], kc, vc, slots[2:3], lens_t[2:3])
    assert torch.equal(alone, got[2:3])


def test_decode_attention_on_an_fp16_cache_reads_the_stored_values():
    q, kc, vc, slots, lens = _paged(3, [5, 17, 40], 40, 100, seed=7)
    kh, vh = kc.half(), vc.half()
    got = native.decode_attention(q, kh, vh, slots, lens)
    assert torch.equal(got, native.decode_attention(q, kh.float(), vh.float(), slots, lens))


def test_decode_attention_refuses_lengths_beyond_the_table():
    q, kc, vc, slots, _ = _paged(1, [4], 4, 16, seed=3)
    with pytest.raises(RuntimeError, match="keys"):
        native.decode_attention(q, kc, vc, slots, torch.tensor([5]))


def test_silu_mul_matches_torch():
    gu = torch.randn(6, 2 * 1536, generator=torch.Generator().manual_seed(4)) * 4
    _close(native.silu_mul(gu), F.silu(gu[:, :1536]) * gu[:, 1536:])


@pytest.mark.skipif(not native.available() or not native.has_vnni(), reason="the CPU has no AVX-512 VNNI")
def test_vnni_products_give_the_avx2_bits():
    g = torch.Generator().manual_seed(5)
    q4 = torch.randint(0, 16, (256, 576), generator=g, dtype=torch.uint8)
    dm = torch.stack([torch.rand(256, 18, generator=g) * 0.01, -torch.rand(256, 18, generator=g) * 0.05], -1)
    dm = dm.half().float()  # fp16 values, as a GGUF's: the interleaved layout
    w = pack_blocks({"w.q4": q4, "w.q4dm": dm}, "w")
    assert w is not None and w.x8
    q8 = torch.randint(-128, 128, (64, 576), generator=g, dtype=torch.int8)
    d8 = torch.rand(64, 18, generator=g) * 0.01
    x = torch.randn(7, 576, generator=g) * 5
    q4_plain = native.pack_q4(q4), dm[..., 0].contiguous(), dm[..., 1].contiguous()
    try:
        assert native.use_vnni(True)
        vnni = block_mm(x, w), native.q8_matmul(x, q8, d8), native.q4_matmul(x, *q4_plain)
        assert not native.use_vnni(False)
        avx2 = block_mm(x, w), native.q8_matmul(x, q8, d8), native.q4_matmul(x, *q4_plain)
    finally:
        native.use_vnni(True)
    for a, b in zip(vnni, avx2, strict=True):
        assert torch.equal(a, b)


@pytest.mark.skipif(not native.available(), reason="no native kernels here")
def test_select_isa_holds_the_kernels_to_a_class_and_back():
    try:
        native.select_isa("avx2")
        assert not native.vnni_on() and not native.amx_on()
        native.select_isa("avx512")
        assert native.vnni_on() == native.has_vnni() and not native.amx_on()
        native.select_isa("auto")
        # Back on exactly where the CPU has them.
        assert native.vnni_on() == native.has_vnni() and native.amx_on() == native.has_amx()
        with pytest.raises(ValueError, match="kernel_isa"):
            native.select_isa("neon")
    finally:
        native.select_isa("auto")
