"""A bus-backed object the gateway opens when it is first asked for: at startup by the lifespan
(lifespan.py), else on first use (tests run the app without a lifespan). When opening fails the gateway
serves without it and tries again 30 s later: limits and budgets protect the pipeline, they must not take
it down, and a bus without JetStream at startup may have it a little later."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger()

T = TypeVar("T")

RETRY_S = 30.0


class OpenedOnUse(Generic[T]):
    def __init__(self, open_it: Callable[[], Awaitable[T]], unavailable: str):
        self._open = open_it
        self._unavailable = unavailable  # the warning logged when opening fails
        self._value: T | None = None
        self._lock = asyncio.Lock()
        self._retry_at = 0.0

    async def get(self) -> T | None:
        async with self._lock:
            if self._value is None and time.monotonic() >= self._retry_at:
                try:
                    self._value = await self._open()
                except Exception as e:
                    self._retry_at = time.monotonic() + RETRY_S
                    log.warning(self._unavailable, error=str(e))
        return self._value
