"""The native format's cache holds the weights as the model serves them (weights.pack_native)."""

from __future__ import annotations

import pytest
import torch

from switchyard.libs.engine import native
from switchyard.libs.engine.kernels import BlockWeight
from switchyard.libs.engine.model import KVCache, LlamaModel
from switchyard.libs.engine.weights import convert, load_weights, pack_native, read_gguf
from tests.engine.test_decode_stack import _decodes, _filled_cache

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


@pytest.fixture(scope="module")
def gguf(model_path):
    return read_gguf(model_path)


def test_the_packed_form_serves_the_same_bits_as_packing_at_load(gguf):
    cfg, raw = gguf
    at_load = LlamaModel(cfg, convert(raw, "native"), "native")
    stored = pack_native(convert(raw, "native"), cfg.num_layers)
    assert not any(n.endswith((".q4", ".q4dm", ".q8", ".q8d")) for n in stored)  # nothing left to pack
    # The tied embedding's rows are looked up in the head's 8-bit blocks (model.Embedding).
    assert not any(n.startswith("token_embd.") for n in stored)
    assert "blk.0.attn_qkv.weight.x8" in stored and "blk.0.attn_q.weight.q4" not in stored
    assert "output.weight.q8x8" in stored  # the output head, interleaved
    served = LlamaModel(cfg, stored, "native")
    w = served.layers[0].qkv
    assert isinstance(w, BlockWeight) and w.values.data_ptr() == stored["blk.0.attn_qkv.weight.x8"].data_ptr()
    head = served.lm_head
    assert isinstance(head, BlockWeight) and head.values.data_ptr() == stored["output.weight.q8x8"].data_ptr()
    batch = _decodes([9, 40, 17])
    assert torch.equal(
        served.forward(batch, _filled_cache(served, 3)), at_load.forward(batch, _filled_cache(at_load, 3))
    )


def test_parts_stored_unlike_are_left_for_the_model_to_stack(gguf):
    cfg, raw = gguf
    t = convert(raw, "native")
    # One part in 8-bit blocks, its siblings in 4-bit: they cannot be stacked as stored.
    q = t.pop("blk.0.attn_k.weight.q4")
    t.pop("blk.0.attn_k.weight.q4dm")
    t["blk.0.attn_k.weight.q8"] = q.to(torch.int8)
    t["blk.0.attn_k.weight.q8d"] = torch.ones(q.shape[0], q.shape[1] // 32)
    assert pack_native(t, cfg.num_layers) is t


def test_the_cache_round_trip_maps_the_packed_form(tmp_path, model_path):
    cfg, first = load_weights(model_path, "native", str(tmp_path))  # converts and writes the cache
    _, again = load_weights(model_path, "native", str(tmp_path))  # maps it
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    model = LlamaModel(cfg, again, "native")
    kv = KVCache(cfg, 48, 16, model.kv_dtype)
    assert torch.isfinite(model.forward(_decodes([5]), kv)).all()
