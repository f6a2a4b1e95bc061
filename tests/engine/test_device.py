"""Device placement: everything a step touches moves with the model (CUDA cannot run here).

The meta device stands in for a GPU: it computes shapes only, and any tensor left on the CPU
makes an operation fail with a device mismatch, which is the bug a GPU run would hit.
"""

import pytest
import torch

from switchyard.libs.engine.engine import EngineDeviceError, NativeEngine
from switchyard.libs.engine.model import AttnBatch, KVCache, PrefillSpan, prefill_mask
from switchyard.libs.engine.types import EngineConfig
from tests.engine.conftest import tiny_model


def _mixed_batch() -> AttnBatch:
    # Two decodes (rows 0-1), a fresh prefill (rows 2-4) and a chunk over a cached prefix (rows 5-6).
    return AttnBatch(
        input_ids=torch.tensor([5, 6, 7, 8, 9, 10, 11]),
        positions=torch.tensor([3, 2, 0, 1, 2, 16, 17]),
        slot_mapping=torch.tensor([3, 18, 32, 33, 34, 64, 65]),
        num_decodes=2,
        decode_slots=torch.tensor([0, 1, 2, 3, 16, 17, 18, 19]),
        decode_bias=torch.tensor([[0.0] * 4, [0.0] * 3 + [float("-inf")]]).view(1, 2, 1, 4),
        prefills=[
            PrefillSpan(2, 3, 0, torch.empty(0, dtype=torch.long), prefill_mask(0, 3)),
            PrefillSpan(5, 2, 16, torch.arange(48, 66), prefill_mask(16, 2)),
        ],
        logits_rows=torch.tensor([0, 1, 4, 6]),
    )


def test_a_step_runs_entirely_on_the_models_device():
    model = tiny_model().to("meta")
    kv = KVCache(model.cfg, 8, 16, torch.float32, device="meta")
    logits = model.forward(_mixed_batch().to(model.device), kv)
    assert logits.device.type == "meta" and logits.shape == (4, model.cfg.vocab_size)


def test_moving_a_model_keeps_its_results():
    model = tiny_model()
    kv = KVCache(model.cfg, 8, 16, torch.float32)
    ref = model.forward(_mixed_batch(), kv)
    moved = tiny_model().to("cpu")
    assert torch.equal(moved.forward(_mixed_batch().to(moved.device), KVCache(model.cfg, 8, 16, torch.float32)), ref)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
async def test_cuda_without_a_gpu_is_a_named_error():
    eng = NativeEngine(EngineConfig(device="cuda", dtype="fp32"))
    with pytest.raises(EngineDeviceError, match="no CUDA GPU"):
        await eng.start()
    with pytest.raises(EngineDeviceError, match="unknown device"):
        await NativeEngine(EngineConfig(device="tpu", dtype="fp32")).start()


async def test_an_unknown_kernel_isa_is_a_named_error():
    with pytest.raises(EngineDeviceError, match="kernel_isa"):
        await NativeEngine(EngineConfig(dtype="fp32", kernel_isa="neon")).start()
