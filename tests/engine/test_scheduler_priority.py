"""The scheduler's policies (priority with aging, fcfs) and the prefix cache's per-tenant salt.

The policy tests drive the Scheduler over a real BlockPool and KVCacheManager with no model: a step
schedules, records that each chunk ran and appends a token where one is sampled. Arrival times are set
explicitly, so ranks are exact. The salt tests run the engine on the tiny random-weight model."""

from __future__ import annotations

import random
import zlib

import pytest

from switchyard.libs.engine.block_pool import BlockPool, block_hashes_for, salt_root
from switchyard.libs.engine.kv_cache_manager import KVCacheManager
from switchyard.libs.engine.request import Request
from switchyard.libs.engine.scheduler import Scheduler
from switchyard.libs.engine.types import SamplingParams
from tests.engine.conftest import make_engine
from tests.engine.helpers import drive, make_request


def _req(rid: str, arrival: float, priority: int = 0, prompt_len: int = 8, max_tokens: int = 50) -> Request:
    ids = [100 + zlib.crc32(rid.encode()) % 1000 * 16 + i for i in range(prompt_len)]
    return Request(rid, ids, SamplingParams(max_tokens=max_tokens, priority=priority), set(), 10_000, arrival=arrival)


def _scheduler(num_blocks: int = 64, max_num_seqs: int = 8, **kw) -> Scheduler:
    return Scheduler(KVCacheManager(BlockPool(num_blocks, 4)), max_num_seqs, 512, **kw)


def _step(s: Scheduler) -> list[str]:
    """One engine step without a model: the ids of the requests that ran."""
    seqs = s.schedule()
    for seq in seqs:
        sampled = seq.samples
        s.advance(seq)
        if sampled:
            seq.request.append_token(7)
    return [seq.request.request_id for seq in seqs]


def test_waiting_queue_is_in_priority_order_and_fcfs_within_a_level():
    s = _scheduler(max_num_seqs=1)
    for r in (_req("free1", 0.0, 4), _req("free2", 0.1, 4), _req("pro1", 0.2, 0), _req("pro2", 0.3, 0)):
        s.add(r)
    assert [r.request_id for r in s.waiting] == ["pro1", "pro2", "free1", "free2"]
    assert _step(s) == ["pro1"]


def test_fcfs_policy_ignores_priority():
    s = _scheduler(max_num_seqs=1, policy="fcfs")
    for r in (_req("free1", 0.0, 4), _req("pro1", 0.2, 0)):
        s.add(r)
    assert _step(s) == ["free1"]
    # Every seat taken: a better priority waits its turn under fcfs.
    assert _step(s) == ["free1"] and s.stats.preemptions == 0


def test_a_better_priority_takes_the_seat_of_a_running_request():
    s = _scheduler(max_num_seqs=2)
    free = [_req("free1", 0.0, 4), _req("free2", 0.1, 4)]
    for r in free:
        s.add(r)
    assert _step(s) == ["free1", "free2"]
    s.add(_req("pro", 0.2, 0))
    ran = _step(s)
    # The later free request leaves its seat and its KV; the earlier keeps decoding.
    assert ran == ["free1", "pro"]
    assert s.stats.preemptions == 1
    assert [r.request_id for r in s.waiting] == ["free2"] and free[1].num_computed == 0


def test_blocks_running_out_preempt_the_lowest_priority_not_the_youngest():
    # 3 requests of 8 prompt tokens (2 blocks each at block size 4) fill 6 of 7 blocks; the next
    # decode steps need a third block each, so someone must go.
    s = _scheduler(num_blocks=7)
    reqs = [_req("pro_old", 0.0, 0), _req("free", 0.1, 4), _req("pro_young", 0.2, 0)]
    for r in reqs:
        s.add(r)
    while s.stats.preemptions == 0:
        _step(s)
    assert [r.request_id for r in s.running] == ["pro_old", "pro_young"]
    assert [r.request_id for r in s.waiting] == ["free"]


def test_under_fcfs_blocks_running_out_preempt_the_youngest():
    s = _scheduler(num_blocks=7, policy="fcfs")
    for r in (_req("pro_old", 0.0, 0), _req("free", 0.1, 4), _req("pro_young", 0.2, 0)):
        s.add(r)
    while s.stats.preemptions == 0:
        _step(s)
    assert [r.request_id for r in s.waiting] == ["pro_young"]


def test_a_waiting_request_takes_blocks_from_a_running_one_it_outranks():
    s = _scheduler(num_blocks=4)
    s.add(_req("free", 0.0, 4, prompt_len=12))  # 3 blocks, then a fourth to decode
    _step(s)
    s.add(_req("pro", 0.1, 0, prompt_len=8))  # needs 2: only one is free
    assert _step(s) == ["pro"]
    assert [r.request_id for r in s.waiting] == ["free"]


def test_aging_lets_an_old_request_pass_a_better_priority_that_came_much_later():
    # One level per second: a free request (4 levels worse) that waited over 4 s outranks a new pro one.
    s = _scheduler(max_num_seqs=1, aging_s=1.0)
    s.add(_req("free", 0.0, 4))
    s.add(_req("pro_soon", 3.5, 0))
    s.add(_req("pro_late", 4.5, 0))
    assert [r.request_id for r in s.waiting] == ["pro_soon", "free", "pro_late"]


def _free_served_at(aging_s: float) -> float | None:
    """A pro request arrives every 0.5 s (one step) and decodes 3 tokens; one seat. When the free
    request (priority 4) first runs, in seconds; None if not within 40 steps."""
    s = _scheduler(max_num_seqs=1, aging_s=aging_s)
    s.add(_req("free", 0.0, 4, max_tokens=2))
    for k in range(40):
        s.add(_req(f"pro{k}", 0.5 * k, 0, max_tokens=3))
        for r in list(s.running):
            if len(r.output_ids) >= r.params.max_tokens:
                s.finish(r, "length")
        if "free" in _step(s):
            return 0.5 * k
    return None


def test_aging_prevents_starvation_under_a_steady_stream_of_better_requests():
    # Ranked at 0 + 4 levels * 1 s: the 8 pro requests that arrived before 4.0 s go first, 3 steps each.
    assert _free_served_at(aging_s=1.0) == 0.5 * 3 * 8
    # Aging 1000 times slower: the stream of pro requests keeps it waiting.
    assert _free_served_at(aging_s=1000.0) is None


def test_without_aging_priorities_do_not_reorder():
    s = _scheduler(max_num_seqs=1, aging_s=0.0)
    s.add(_req("free", 0.0, 4))
    s.add(_req("pro", 1.0, 0))
    assert [r.request_id for r in s.waiting] == ["free", "pro"]


def test_bad_policy_and_aging_are_refused():
    with pytest.raises(ValueError, match="scheduling policy"):
        _scheduler(policy="lottery")
    with pytest.raises(ValueError, match="aging"):
        _scheduler(aging_s=-1)


# -- the prefix cache's salt --------------------------------------------------------------------


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


def test_salt_changes_every_block_key_and_only_under_its_own_salt():
    ids = _prompt(12, 1)
    plain = block_hashes_for(ids, 4)
    a = block_hashes_for(ids, 4, root=salt_root("tenant-a"))
    b = block_hashes_for(ids, 4, root=salt_root("tenant-b"))
    assert len({*plain, *a, *b}) == 9  # no key shared between salts, nor with no salt
    assert a == block_hashes_for(ids, 4, root=salt_root("tenant-a"))
    assert salt_root(None) is None


def test_salted_prefixes_are_reused_within_a_tenant_and_never_across(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    shared = _prompt(16, 2)
    drive(eng, [make_request("a1", shared + _prompt(3, 3), max_tokens=2, cache_salt="tenant-a")])
    other = make_request("b1", shared + _prompt(3, 4), max_tokens=2, cache_salt="tenant-b")
    unsalted = make_request("u1", shared + _prompt(3, 5), max_tokens=2)
    same = make_request("a2", shared + _prompt(3, 6), max_tokens=2, cache_salt="tenant-a")
    drive(eng, [other])
    drive(eng, [unsalted])
    drive(eng, [same])
    assert other.cached_tokens == 0
    assert unsalted.cached_tokens == 0
    assert same.cached_tokens == 16


def test_a_first_blocks_cached_tail_stays_within_its_tenant(tiny):
    # A prompt shorter than a block leaves only a tail block: its key is the salt, not "no parent".
    eng = make_engine(tiny, block_size=16, num_blocks=64)
    short = _prompt(9, 7)
    drive(eng, [make_request("a1", short, max_tokens=2, cache_salt="tenant-a")])
    other = make_request("b1", [*short, 5], max_tokens=2, cache_salt="tenant-b")
    drive(eng, [other])
    assert other.cached_tokens == 0
    again = make_request("a2", [*short, 5], max_tokens=2, cache_salt="tenant-a")
    drive(eng, [again])
    assert again.cached_tokens > 0


def test_salted_output_matches_unsalted(tiny):
    p = _prompt(21, 8)
    salted = make_engine(tiny, block_size=4, num_blocks=64)
    plain = make_engine(tiny, block_size=4, num_blocks=64)
    drive(salted, [make_request("w", p, max_tokens=2, cache_salt="t")])
    r = make_request("x", p, max_tokens=6, cache_salt="t")
    assert drive(salted, [r])["x"] == drive(plain, [make_request("x", p, max_tokens=6)])["x"]
    assert r.cached_tokens > 0
