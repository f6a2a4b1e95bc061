"""Budgets and write limits under concurrency, on a real nats-server's key-value store: 32 takers at once
(from one gateway, and from two) never get more than there is."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.limits import Limiter
from switchyard.libs.limits.budget import BudgetRefusal, KeyBudgets
from switchyard.libs.telemetry import setup_tracing
from switchyard.services.gateway.settings import TierLimits

AT_ONCE = 32


@pytest.fixture
async def buses(nats_server: NatsServer) -> AsyncIterator[tuple[Bus, Bus]]:
    a = await Bus.connect(nats_server.url, "gateway", "a", setup_tracing("gateway"))
    b = await Bus.connect(nats_server.url, "gateway", "b", setup_tracing("gateway"))
    yield a, b
    await a.close()
    await b.close()


async def test_32_reservations_at_once_take_at_most_the_budget_and_settling_gives_the_rest_back(
    buses: tuple[Bus, Bus],
) -> None:
    bucket = f"kb_{uuid.uuid4().hex[:8]}"
    # Two gateways, each with its own process-local queue: only the compare-and-set keeps them honest.
    one, two = await KeyBudgets.open(buses[0], bucket), await KeyBudgets.open(buses[1], bucket)
    budget, want, now = 100, 10, now_ms()
    got = await asyncio.gather(
        *((one if i % 2 else two).reserve("key_a", want, budget, None, now) for i in range(AT_ONCE))
    )
    taken = [g for g in got if isinstance(g, int)]
    refused = [g for g in got if isinstance(g, BudgetRefusal)]
    assert sum(taken) == budget and len(taken) == budget // want
    assert len(refused) == AT_ONCE - len(taken) and all(r.budget == "day" and r.limit == budget for r in refused)
    assert (await one.spent("key_a", now)).day == budget
    # Each used 3 of its 10: settled, the key has spent what was used, and has the rest again.
    await asyncio.gather(*((one if i % 2 else two).debit("key_a", 3 - t, now) for i, t in enumerate(taken)))
    assert (await two.spent("key_a", now)).day == 3 * len(taken)
    assert await one.reserve("key_a", want, budget, None, now) == want


async def test_a_reservation_is_at_most_what_is_left(buses: tuple[Bus, Bus]) -> None:
    budgets = await KeyBudgets.open(buses[0], f"kb_{uuid.uuid4().hex[:8]}")
    now = now_ms()
    assert await budgets.reserve("key_b", 70, None, 100, now) == 70
    assert await budgets.reserve("key_b", 70, None, 100, now) == 30  # only what is left
    refusal = await budgets.reserve("key_b", 1, None, 100, now)
    assert isinstance(refusal, BudgetRefusal) and refusal.budget == "month" and refusal.spent == 100


async def test_32_writes_at_once_pass_at_most_the_per_minute_limit(buses: tuple[Bus, Bus]) -> None:
    bucket = f"lim_{uuid.uuid4().hex[:8]}"
    one, two = await Limiter.open(buses[0], bucket), await Limiter.open(buses[1], bucket)
    limits = TierLimits(requests_per_minute=20, tokens_per_minute=1000, concurrent_streams=2)
    got = await asyncio.gather(*((one if i % 2 else two).admit_write("acme", limits) for i in range(AT_ONCE)))
    passed = [g for g in got if g is None]
    refused = [g for g in got if g is not None]
    # The bucket refills a third of a request a second while they run: 21 at most.
    assert 20 <= len(passed) <= 21
    assert all(r.limit == "requests_per_minute" and r.retry_after_s > 0 for r in refused)


async def test_a_gateway_writes_on_its_own_last_revision_and_still_sees_another_gateways_leases(
    buses: tuple[Bus, Bus],
) -> None:
    bucket = f"lim_{uuid.uuid4().hex[:8]}"
    one, two = await Limiter.open(buses[0], bucket), await Limiter.open(buses[1], bucket)
    limits = TierLimits(requests_per_minute=100, tokens_per_minute=1000, concurrent_streams=3)
    reads = 0
    real_get = one.kv.get

    async def counted_get(key: str) -> tuple[bytes | None, int]:
        nonlocal reads
        reads += 1
        return await real_get(key)

    one.kv.get = counted_get  # type: ignore[method-assign]
    assert await one.admit("acme", "r1", limits, lease_s=60) is None
    await one.settle("acme", "r1", 5, limits)
    assert await one.admit("acme", "r2", limits, lease_s=60) is None
    assert reads == 1  # after its first read, one wrote on the revision its own last write returned
    # Another gateway takes two leases: one's copy is stale, its compare-and-set fails, and it reads them.
    assert await two.admit("acme", "r3", limits, lease_s=60) is None
    assert await two.admit("acme", "r4", limits, lease_s=60) is None
    refusal = await one.admit("acme", "r5", limits, lease_s=60)
    assert refusal is not None and refusal.limit == "concurrent_streams"
    assert reads == 2
    # Settling r3 on one (it was taken on two) frees its lease for both.
    await one.settle("acme", "r3", 5, limits)
    assert await two.admit("acme", "r6", limits, lease_s=60) is None
