"""The KV-cache manager on a real block pool: block tables, prefix lookup, tails, frees.

The tests play the scheduler's part: they write `num_computed` after each chunk "runs"."""

import copy

from switchyard.libs.engine.block_pool import BlockPool
from switchyard.libs.engine.kv_cache_manager import KVCacheManager
from tests.engine.helpers import make_request


def _manager(num_blocks: int = 16, block_size: int = 4, caching: bool = True) -> KVCacheManager:
    return KVCacheManager(BlockPool(num_blocks, block_size, caching))


def _run(kv: KVCacheManager, req, n: int | None = None) -> None:
    """Admit (or continue) a request and compute n more of its tokens (default: all but none left)."""
    computed = kv.get_computed_blocks(req) if not kv.get_block_ids(req.request_id) else None
    start = computed.num_tokens if computed is not None else req.num_computed
    n = req.num_tokens - start if n is None else n
    args = (computed,) if computed is not None else ()
    assert kv.allocate_slots(req, n, *args) is not None
    req.num_computed = start + n
    kv.cache_full_blocks(req)


def test_a_table_grows_one_block_per_block_size_tokens():
    kv = _manager(block_size=4)
    r = make_request("a", list(range(100, 106)))  # 6 tokens: 2 blocks
    new = kv.allocate_slots(r, 6, kv.get_computed_blocks(r))
    assert new is not None and kv.get_block_ids("a") == new and len(new) == 2
    r.num_computed = 6
    assert kv.allocate_slots(r, 2) == []  # positions 6 and 7 fit the second block
    r.num_computed = 8
    grown = kv.allocate_slots(r, 1)
    assert grown is not None and len(grown) == 1 and kv.get_block_ids("a") == [*new, *grown]
    assert kv.num_used_blocks == 3 and kv.num_free_blocks == 13


def test_a_refused_allocation_changes_nothing():
    kv = _manager(num_blocks=3, block_size=4)
    r = make_request("a", list(range(100, 120)))  # 20 tokens: 5 blocks
    assert kv.allocate_slots(r, 20, kv.get_computed_blocks(r)) is None
    assert kv.get_block_ids("a") == [] and kv.num_free_blocks == 3
    assert kv.stats.queries_tokens == 0  # only admitted requests count
    assert kv.allocate_slots(r, 12, kv.get_computed_blocks(r)) is not None  # a chunk that fits
    r.num_computed = 12
    assert kv.allocate_slots(r, 8) is None and len(kv.get_block_ids("a")) == 3


def test_a_second_request_shares_the_cached_full_blocks():
    kv = _manager(block_size=4)
    prompt = list(range(100, 118))  # 4 full blocks + 2
    first = make_request("a", prompt)
    _run(kv, first)
    first_table = list(kv.get_block_ids("a"))
    second = make_request("b", [*prompt[:16], 7, 8, 9])
    computed = kv.get_computed_blocks(second)
    assert computed.block_ids == first_table[:4] and computed.tail_block is None and computed.num_tokens == 16
    assert kv.allocate_slots(second, 3, computed) is not None
    assert kv.get_block_ids("b")[:4] == first_table[:4]
    assert kv.get_block_ids("b")[4] not in first_table
    assert kv.stats.queries_tokens == 18 + 19 and kv.stats.hits_tokens == 16
    kv.free(first)
    kv.free(second)
    assert kv.num_free_blocks == 16


def test_the_last_token_is_always_left_to_compute():
    kv = _manager(block_size=4)
    prompt = list(range(100, 108))  # exactly 2 blocks
    first = make_request("a", prompt)
    _run(kv, first)
    kv.free(first)
    again = kv.get_computed_blocks(make_request("b", prompt))
    assert len(again.block_ids) == 1 and again.num_tokens == 4


def test_free_keeps_the_partial_last_block_for_the_next_turn():
    kv = _manager(block_size=4)
    prompt = list(range(100, 111))  # 2 full blocks and 3 tokens
    first = make_request("t1", prompt)
    _run(kv, first)
    table = list(kv.get_block_ids("t1"))
    kv.free(first)
    nxt = make_request("t2", [*prompt, 1, 2, 3])
    computed = kv.get_computed_blocks(nxt)
    assert computed.block_ids == table[:2] and computed.tail_block == table[2] and computed.num_tokens == 11
    assert kv.allocate_slots(nxt, 3, computed) is not None
    assert kv.get_block_ids("t2")[:3] == table
    # Adopted: the block is t2's own now, offered to nobody else.
    other = kv.get_computed_blocks(make_request("t3", [*prompt, 9]))
    assert other.tail_block is None and other.num_tokens == 8


def test_reused_blocks_in_the_free_queue_count_against_the_free_blocks():
    kv = _manager(num_blocks=4, block_size=2)
    first = make_request("a", [1, 2, 3, 4, 5])  # 2 full blocks and a tail of 1
    _run(kv, first)
    kv.free(first)
    second = make_request("b", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    computed = kv.get_computed_blocks(second)
    assert computed.num_tokens == 5 and len(computed.all_block_ids) == 3
    # 4 more tokens need 2 new blocks, but all 3 reused ones wait in the free queue: 5 > 4.
    assert kv.allocate_slots(second, 4, computed) is None
    assert kv.num_free_blocks == 4 and kv.get_block_ids("b") == []
    assert kv.allocate_slots(second, 3, computed) is not None
    assert kv.num_free_blocks == 0 and kv.get_block_ids("b")[:3] == computed.all_block_ids


def test_freeing_part_way_keeps_the_computed_prefix_for_recompute():
    kv = _manager(block_size=4)
    r = make_request("a", list(range(100, 130)))
    _run(kv, r, 10)  # a first chunk, then preempted
    kv.free(r)
    r.num_computed = 0
    computed = kv.get_computed_blocks(r)
    assert computed.num_tokens == 10 and len(computed.block_ids) == 2 and computed.tail_block is not None


def test_without_prefix_caching_nothing_is_found_or_kept():
    kv = _manager(block_size=4, caching=False)
    prompt = list(range(100, 111))
    first = make_request("a", prompt)
    _run(kv, first)
    kv.free(first)
    assert kv.get_computed_blocks(make_request("b", [*prompt, 1])).num_tokens == 0
    assert kv.num_free_blocks == 16
    assert all(b.block_hash is None and b.tail is None for b in kv.block_pool.blocks)


def test_the_manager_writes_no_request_field():
    kv = _manager(block_size=4)
    r = make_request("a", list(range(100, 111)))
    r.hashes(4)  # the request's own cache of its hashes, filled in by the request itself

    def fields() -> dict:
        return copy.deepcopy({k: v for k, v in vars(r).items() if k != "generator"})

    before = fields()
    assert kv.allocate_slots(r, 11, kv.get_computed_blocks(r)) is not None
    assert fields() == before
    r.num_computed = 11  # the scheduler's write, after the chunk ran
    before = fields()
    kv.cache_full_blocks(r)
    kv.free(r)
    assert fields() == before
    assert kv.get_computed_blocks(make_request("b", list(range(100, 112)))).num_tokens == 11
