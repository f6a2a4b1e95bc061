"""Every write route is rate limited: conversations, memory, files, feedback, keys and the other admin
writes each take one request from the tenant's per-minute bucket (the one its chats take from), so a key
limited to 20 requests a minute cannot write 100 times a minute by skipping the chat routes. Over the
limit: 429 in the one error shape, with `Retry-After`. Reads are not counted here."""

from __future__ import annotations

from fastapi import Request

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.errors import ApiError

READS = frozenset({"GET", "HEAD", "OPTIONS"})


async def limit_writes(request: Request, gw: Gw, key: Principal) -> None:
    """A router dependency: a no-op for reads; a write takes one request from the key's tenant or is refused."""
    if request.method in READS:
        return
    limiter = await gw.limiter()
    if limiter is None:
        return
    limits = gw.settings.tiers.get(key.tier) or gw.settings.tiers["free"]
    refusal = await limiter.admit_write(key.tenant, limits)
    if refusal is not None:
        gw.metrics.rate_limited.labels(refusal.limit).inc()
        raise ApiError(ErrorCode.rate_limited, refusal.message, retry_after=refusal.retry_after_s)
