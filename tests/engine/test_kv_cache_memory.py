"""The CPU KV cache takes memory only where written, in small pages whatever the host's THP mode."""

import os

import pytest
import torch

from switchyard.libs.engine.model import KVCache
from switchyard.libs.engine.weights import LlamaConfig

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")


def _mapping(addr: int) -> dict[str, str]:
    """The smaps fields of the mapping that holds `addr`."""
    fields: dict[str, str] = {}
    inside = False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                if inside:
                    break
                inside = lo <= addr < hi
            elif inside:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    return fields


def test_an_unwritten_cache_is_not_resident_and_a_written_block_is_small():
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=576, intermediate_size=1536, num_layers=30, num_heads=9, num_kv_heads=3,
        head_dim=64, rope_theta=10000.0, rms_eps=1e-5, max_position=8192, tie_embeddings=True,
    )  # fmt: skip
    kv = KVCache(cfg, num_blocks=512, block_size=16, dtype=torch.float16)  # 2 x 45 MiB
    m = _mapping(kv.k.data_ptr())
    assert "nh" in m["VmFlags"].split()  # no huge pages: a first write takes 4 KiB, not 2 MiB
    assert int(m["Rss"].split()[0]) == 0
    kv.k[:, :, 16:32] = 1.0  # one block, every layer and head
    rss_kib = int(_mapping(kv.k.data_ptr())["Rss"].split()[0])
    # 90 pieces of 2 KiB, each in its own 4 KiB page: well under a MiB, where huge pages give 180 MiB.
    assert 0 < rss_kib <= 90 * 4 * 2
