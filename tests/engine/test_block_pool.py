import pytest

from switchyard.libs.engine.block_pool import BlockPool, NoFreeBlocksError, block_hashes_for, hash_block


def test_allocate_and_exhaust():
    pool = BlockPool(4, 2)
    assert pool.num_free == 4
    ids = pool.allocate(3)
    assert ids == [0, 1, 2]
    assert pool.num_free == 1
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    pool.free(ids)
    assert pool.num_free == 4
    assert all(b.ref_cnt == 0 for b in pool.blocks)


def test_hash_chains_parent():
    a = hash_block(None, [1, 2])
    assert hash_block(a, [3, 4]) != hash_block(None, [3, 4])
    assert block_hashes_for([1, 2, 3, 4, 5], 2) == [a, hash_block(a, [3, 4])]


def test_lookup_touch_and_refcounts():
    pool = BlockPool(6, 2)
    hashes = block_hashes_for([1, 2, 3, 4], 2)
    ids = pool.allocate(2)
    for bid, h in zip(ids, hashes, strict=True):
        pool.cache_block(bid, h)
    assert pool.lookup(hashes) == ids
    pool.touch(ids)  # a second request shares them
    assert [pool.blocks[b].ref_cnt for b in ids] == [2, 2]
    pool.free(ids)
    pool.free(ids)
    assert [pool.blocks[b].ref_cnt for b in ids] == [0, 0]
    # Freed but still cached: a later request can take them back out of the free queue.
    assert pool.lookup(hashes) == ids
    pool.touch(ids)
    assert pool.num_free == 4


def test_eviction_is_lru_and_tail_first():
    pool = BlockPool(4, 1)
    a = pool.allocate(2)  # blocks 0, 1: a two-block sequence
    b = pool.allocate(2)  # blocks 2, 3
    ha = block_hashes_for([10, 11], 1)
    hb = block_hashes_for([20, 21], 1)
    for bid, h in zip(a + b, ha + hb, strict=True):
        pool.cache_block(bid, h)
    pool.free(a)  # a freed first: least recently used
    pool.free(b)
    # a's tail goes before its head; then b's tail and head.
    assert pool.free_ids_in_order() == [a[1], a[0], b[1], b[0]]
    # Reusing b's head refreshes it: it moves behind everything else.
    pool.touch([b[0]])
    pool.free([b[0]])
    assert pool.free_ids_in_order() == [a[1], a[0], b[1], b[0]]
    pool.touch([a[0]])
    pool.free([a[0]])
    assert pool.free_ids_in_order() == [a[1], b[1], b[0], a[0]]
    got = pool.allocate(1)
    assert got == [a[1]]
    assert pool.lookup(ha) == [a[0]]  # the head survives, the evicted tail is gone
    assert pool.lookup(hb) == b


def test_uncached_blocks_are_handed_out_before_cached_ones():
    pool = BlockPool(3, 1)
    cached = pool.allocate(1)
    pool.cache_block(cached[0], hash_block(None, [1]))
    plain = pool.allocate(1)
    pool.free(cached)
    pool.free(plain)
    assert pool.allocate(1) == plain


def test_a_tail_is_matched_by_its_longest_shared_run_then_adopted():
    pool = BlockPool(6, 4)
    parent = hash_block(None, [1, 2, 3, 4])
    a, b = pool.allocate(2)
    pool.cache_tail(a, parent, [5, 6])
    pool.cache_tail(b, parent, [5, 7, 8])
    pool.free([a])
    pool.free([b])
    # Both wait in the free queue behind the never-used blocks, like cached full blocks.
    assert pool.free_ids_in_order()[-2:] == [a, b]
    assert pool.match_tail(parent, [5, 7, 8, 9]) == (b, 3)
    assert pool.match_tail(parent, [5, 6, 0]) == (a, 2)
    assert pool.match_tail(parent, [9]) is None
    assert pool.match_tail(None, [5, 6]) is None  # another parent: another prefix
    pool.adopt_tail(b)
    assert pool.blocks[b].ref_cnt == 1 and b not in pool.free_ids_in_order()
    assert pool.match_tail(parent, [5, 7]) == (a, 1)


def test_an_evicted_or_reset_tail_is_no_longer_offered():
    pool = BlockPool(2, 4)
    (a,) = pool.allocate(1)
    pool.cache_tail(a, None, [1, 2])
    pool.free([a])
    assert pool.allocate(2)[-1] == a  # handed out last, and its contents are gone
    assert pool.match_tail(None, [1, 2]) is None and pool.blocks[a].tail is None
    pool.free([0, 1])
    pool.allocate(1)
    (c,) = pool.allocate(1)
    pool.cache_tail(c, None, [3])
    pool.free([c])
    pool.reset_prefix_cache()
    assert pool.match_tail(None, [3]) is None


def test_block_keys_are_digests_that_a_crafted_prompt_cannot_collide() -> None:
    # Python's hash() collides on these (hash(-1) == hash(-2)); a key built from it would hand one
    # prompt's cached KV to the other.
    assert hash((None, (-1,))) == hash((None, (-2,)))
    assert hash_block(None, [-1]) != hash_block(None, [-2])
    # Chained: the same block after different prefixes gets different keys; equal input, equal key.
    a, b = hash_block(None, [1, 2]), hash_block(None, [1, 3])
    assert hash_block(a, [5, 6]) != hash_block(b, [5, 6])
    assert hash_block(a, [5, 6]) == hash_block(hash_block(None, [1, 2]), [5, 6])
    assert 0 <= hash_block(a, [5, 6]) < 2**128
