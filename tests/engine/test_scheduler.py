"""Block-level behaviour of the engine on a tiny random-weight Llama."""

import random

from switchyard.libs.engine.block_pool import block_hashes_for
from tests.engine.conftest import make_engine
from tests.engine.helpers import drive, make_request


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


def _all_free(eng) -> bool:
    pool = eng.kv_cache_manager.block_pool
    return pool.num_free == pool.num_blocks and all(b.ref_cnt == 0 for b in pool.blocks)


def test_shared_prefix_reuses_exact_blocks(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    base = _prompt(18, 1)  # 4 full blocks + 2 tokens
    first = make_request("a", base, max_tokens=1)
    drive(eng, [first])
    pool = eng.kv_cache_manager.block_pool
    hashes = block_hashes_for(base, 4)
    first_blocks = pool.lookup(hashes)
    assert len(first_blocks) == 4

    second = make_request("b", base[:16] + _prompt(5, 2), max_tokens=1)
    eng.scheduler.add(second)
    seqs = eng.scheduler.schedule()
    assert seqs[0].block_ids[:4] == first_blocks
    assert seqs[0].num_new_tokens == 5  # only the new tokens are prefilled
    assert second.cached_tokens == 16
    eng._step(seqs)
    assert _all_free(eng)
    m = eng.metrics()
    assert m.prefix_cache_hits_tokens == 16


def test_fully_cached_prompt_still_computes_last_token(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    p = _prompt(16, 3)
    out1 = drive(eng, [make_request("a", p, max_tokens=4)])
    r = make_request("b", p, max_tokens=4)
    out2 = drive(eng, [r])
    assert out1["a"] == out2["b"]
    assert r.cached_tokens == 12


def test_prefix_cached_output_matches_uncached(tiny):
    p = _prompt(37, 4)
    cold = make_engine(tiny, block_size=4, num_blocks=64, enable_prefix_caching=False)
    warm = make_engine(tiny, block_size=4, num_blocks=64)
    drive(warm, [make_request("w", p[:30], max_tokens=2)])
    r = make_request("x", p, max_tokens=10)
    assert drive(warm, [r])["x"] == drive(cold, [make_request("x", p, max_tokens=10)])["x"]
    # 7 full blocks, and 2 more tokens from the partial block the warm-up request left behind.
    assert r.cached_tokens == 30


def test_next_turn_adopts_the_partial_block_the_previous_turn_left(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    prompt = _prompt(17, 7)
    first = make_request("t1", prompt, max_tokens=3)
    drive(eng, [first])
    # 19 tokens computed (the last sampled one never is): 4 full blocks and a tail of 3.
    pool = eng.kv_cache_manager.block_pool
    first_blocks = pool.lookup(block_hashes_for(prompt, 4))
    tails = [b for b in pool.blocks if b.tail is not None]
    assert len(first_blocks) == 4 and len(tails) == 1
    tail_block = tails[0].block_id
    assert tails[0].tail[1] == (prompt[16], *first.output_ids[:2])

    nxt = prompt + first.output_ids + _prompt(6, 8)  # the next turn continues the answer
    second = make_request("t2", nxt, max_tokens=5)
    eng.scheduler.add(second)
    seqs = eng.scheduler.schedule()
    assert seqs[0].block_ids[:5] == [*first_blocks, tail_block]
    assert second.cached_tokens == 19 and seqs[0].num_new_tokens == len(nxt) - 19
    assert all(b.tail is None for b in pool.blocks)  # adopted: no longer offered to others
    eng._step(seqs)
    drive(eng, [])
    cold = make_engine(tiny, block_size=4, num_blocks=64, enable_prefix_caching=False)
    assert second.output_ids == drive(cold, [make_request("t2", nxt, max_tokens=5)])["t2"]
    assert _all_free(eng)
    assert eng.metrics().prefix_cache_hits_tokens == 19


def test_refcounts_return_to_zero_after_concurrent_requests(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    shared = _prompt(12, 5)
    reqs = [make_request(f"r{i}", shared + _prompt(3 + i, 10 + i), max_tokens=5 + i) for i in range(5)]
    drive(eng, reqs)
    assert all(len(r.output_ids) == 5 + i for i, r in enumerate(reqs))
    assert _all_free(eng)


def test_chunked_prefill_matches_single_pass(tiny):
    prompts = [_prompt(n, 20 + n) for n in (23, 9, 40)]
    whole = make_engine(tiny, block_size=4, num_blocks=128, max_num_batched_tokens=512)
    chunked = make_engine(tiny, block_size=4, num_blocks=128, max_num_batched_tokens=7)
    a = drive(whole, [make_request(str(i), p, max_tokens=6) for i, p in enumerate(prompts)])
    b = drive(chunked, [make_request(str(i), p, max_tokens=6) for i, p in enumerate(prompts)])
    assert a == b


def test_preemption_and_recompute_give_same_tokens(tiny):
    prompts = [_prompt(10 + 3 * i, 40 + i) for i in range(4)]
    roomy = make_engine(tiny, block_size=4, num_blocks=256)
    expected = drive(roomy, [make_request(str(i), p, max_tokens=20) for i, p in enumerate(prompts)])
    # 4 sequences growing to ~40 tokens need ~40 blocks; 20 forces the youngest out repeatedly.
    tight = make_engine(tiny, block_size=4, num_blocks=20)
    got = drive(tight, [make_request(str(i), p, max_tokens=20) for i, p in enumerate(prompts)])
    assert got == expected
    assert tight.metrics().preemptions > 0
    # Recompute starts from whatever prefix blocks survived in the cache.
    assert tight.metrics().prefix_cache_hits_tokens > 0
    assert _all_free(tight)


def test_max_num_seqs_limits_running(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64, max_num_seqs=2)
    seen: list[int] = []
    reqs = [make_request(str(i), _prompt(5, 60 + i), max_tokens=3) for i in range(5)]
    drive(eng, reqs, on_step=lambda _s: seen.append(len(eng.scheduler.running)))
    assert max(seen) <= 2
    assert all(len(r.output_ids) == 3 for r in reqs)
