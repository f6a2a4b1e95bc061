"""A request that must get through: asked again while nobody answers, up to a bound.

For idempotent requests whose loss the client would see (saving a turn it was shown): a stage that
restarts (its supervisor brings it back within seconds), a bus that reconnects or a database that is
briefly away must cost a wait, not the answer. An error reply that says the request itself is wrong
(bad request, not found, ...) is raised at once; silence and failures of the responder are retried.
"""

from __future__ import annotations

import asyncio
import time
from typing import TypeVar

import nats.errors
import structlog
from pydantic import BaseModel

from switchyard.libs.bus.bus import Bus, BusError, NoAnswer, NobodyListens
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import ErrorCode

R = TypeVar("R", bound=BaseModel)
log = structlog.get_logger()
# Silence that is retried: no subscriber (the stage is restarting), no reply in time (it is starting, or
# busy), the connection away (the bus is restarting; nats-py buffers what is sent meanwhile).
_SILENCE = (NobodyListens, NoAnswer, nats.errors.Error)
# Error replies worth asking again: the responder failed (its database away), not the request.
_RETRIED = frozenset({ErrorCode.internal, ErrorCode.unavailable})


async def request_until(
    bus: Bus,
    subject: str,
    msg: BaseModel,
    reply_type: type[R],
    *,
    bound_s: float,
    attempt_s: float = 5.0,
    first_pause_s: float = 0.1,
    max_pause_s: float = 1.0,
) -> R:
    """`bus.request` until answered, for at most `bound_s` in all; BusError(unavailable) after it.

    Each attempt carries the bound as its deadline, so a copy delivered late (buffered while the bus was
    away) is dropped by the responder instead of done after the caller gave up. The request must be
    idempotent: a reply lost in transit means the work was done and is asked for again."""
    give_up = time.monotonic() + bound_s
    deadline_ms = now_ms() + int(bound_s * 1000)
    pause, attempts = first_pause_s, 0
    while True:
        attempts += 1
        left = give_up - time.monotonic()
        try:
            return await bus.request(
                subject, msg, reply_type, timeout=max(min(attempt_s, left), 0.05), deadline_ms=deadline_ms
            )
        except (*_SILENCE, BusError) as e:
            if isinstance(e, BusError) and not isinstance(e, _SILENCE) and e.code not in _RETRIED:
                raise
            why = e.message if isinstance(e, BusError) else (str(e) or type(e).__name__)
            if time.monotonic() + pause >= give_up:
                raise BusError(
                    ErrorCode.unavailable, f"{subject} did not answer within {bound_s:g}s ({attempts} tries): {why}"
                ) from e
            log.info("no answer yet, asking again", subject=subject, attempt=attempts, error=why)
            await asyncio.sleep(pause)
            pause = min(pause * 2, max_pause_s)
