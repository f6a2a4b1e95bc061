"""The decode stack (switchyard/libs/engine/native/decode_stack.cpp): every layer of an all-decode step in one
native call, with the same bits as the Python loop over the same native ops."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from switchyard.libs.engine import native
from switchyard.libs.engine.model import AttnBatch, KVCache, LlamaModel
from switchyard.libs.engine.weights import load_weights
from tests.engine.conftest import CACHE_DIR

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


@pytest.fixture(scope="module")
def native_model(model_path):
    cfg, tensors = load_weights(model_path, "native", CACHE_DIR)
    return LlamaModel(cfg, tensors, "native").pack_cpu_weights()


def _decodes(lens: list[int], first_slot: int = 600) -> AttnBatch:
    """One decode per row: row b attends to slots 0..lens[b]-1 and writes its new key at a slot of
    its own, past every table."""
    b, width = len(lens), max(lens)
    table = torch.arange(width).repeat(b, 1)
    return AttnBatch(
        input_ids=torch.tensor(lens) + 100,  # a row's token follows from its length alone
        positions=torch.tensor(lens) - 1,
        slot_mapping=torch.arange(b) + first_slot,
        num_decodes=b,
        decode_slots=table.view(-1),
        decode_bias=torch.zeros(1, b, 1, width),
        prefills=[],
        logits_rows=torch.arange(b),
        free_rows=b,
        decode_lens=torch.tensor(lens),
    )


def _filled_cache(model: LlamaModel, seed: int) -> KVCache:
    kv = KVCache(model.cfg, 48, 16, model.kv_dtype)
    g = torch.Generator().manual_seed(seed)
    kv.k.copy_(torch.randn(kv.k.shape, generator=g).to(kv.k.dtype))
    kv.v.copy_(torch.randn(kv.v.shape, generator=g).to(kv.v.dtype))
    return kv


@pytest.mark.parametrize("lens", [[37], [5, 130, 64], [40 + 9 * i for i in range(8)]])
def test_the_stack_gives_the_loops_bits(native_model, lens):
    batch = _decodes(lens)
    looped, stacked = _filled_cache(native_model, 1), _filled_cache(native_model, 1)
    try:
        native_model.use_decode_stack = False
        ref = native_model.forward(batch, looped)
        native_model.use_decode_stack = True
        out = native_model.forward(batch, stacked)
    finally:
        native_model.use_decode_stack = True
    assert native_model._native_stack() is not None  # the stack did run
    assert torch.equal(out, ref)
    # The new keys and values went to the same slots, with the same bits.
    assert torch.equal(stacked.k, looped.k) and torch.equal(stacked.v, looped.v)


def test_a_row_gets_the_same_bits_in_any_batch(native_model):
    alone = native_model.forward(_decodes([70]), _filled_cache(native_model, 2))
    among = native_model.forward(_decodes([12, 70, 33]), _filled_cache(native_model, 2))
    assert torch.equal(alone[0], among[1])


def test_layers_not_in_block_form_keep_the_loop(native_model):
    dense = dataclasses.replace(native_model.layers[0], o=torch.zeros(576, 576))
    saved = native_model.layers
    try:
        native_model.layers = [dense, *saved[1:]]
        assert native_model._native_stack() is None
    finally:
        native_model.layers = saved
    assert native_model._native_stack() is not None  # rebuilt for the model's own layers


def test_the_stack_refuses_a_cache_of_another_depth(native_model):
    stack = native_model._native_stack()
    kv = KVCache(dataclasses.replace(native_model.cfg, num_layers=2), 8, 16, native_model.kv_dtype)
    x = torch.zeros(1, native_model.cfg.hidden_size)
    one = torch.zeros(1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="layers"):
        stack.run(x, native_model.cos, native_model.sin, one, kv.k, kv.v, one, one.view(1, 1), one + 1)
