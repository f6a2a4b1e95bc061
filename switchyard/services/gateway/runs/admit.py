"""The key's rate limits for a request that is not a streamed run (embeddings, token counting): one request
and one concurrent-stream lease taken before the work, the tokens it used debited after (as `start_run` does
for a chat request)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError


@dataclass
class Debit:
    tokens: int = 0


@contextlib.asynccontextmanager
async def limited(gw: Gateway, key: ApiKey, rid: str, model: str | None = None) -> AsyncIterator[Debit]:
    """Refuses with 429 (and `Retry-After`) when a limit does; the lease goes back however the body ends.
    With `model`, the key's own policy too: 403 for a model it may not use, 429 for a spent token
    budget, and the tokens used counted against its budgets."""
    if model is None:
        async with _tier_limited(gw, key, rid) as debit:
            yield debit
        return
    hold = await gw.key_policy.admit(key, model)
    async with _tier_limited(gw, key, rid) as debit:
        try:
            yield debit
        finally:
            if hold is not None:
                await hold.settle(debit.tokens)


@contextlib.asynccontextmanager
async def _tier_limited(gw: Gateway, key: ApiKey, rid: str) -> AsyncIterator[Debit]:
    debit = Debit()
    limiter = await gw.limiter()
    if limiter is None:
        yield debit
        return
    limits = gw.settings.tiers.get(key.tier) or gw.settings.tiers["free"]
    refusal = await limiter.admit(key.tenant, rid, limits, lease_s=gw.settings.request_timeout_s + 30)
    if refusal is not None:
        gw.metrics.rate_limited.labels(refusal.limit).inc()
        raise ApiError(ErrorCode.rate_limited, refusal.message, retry_after=refusal.retry_after_s)
    try:
        yield debit
    finally:
        await limiter.settle(key.tenant, rid, debit.tokens, limits)
