"""Key standing: the logger suspends abusive keys, every gateway enforces it, an admin reinstates
(admin_api.py).

The gateway keeps a local copy of the `key_standing` bucket through a watch, so checking a key on
every request costs no round trip."""

from __future__ import annotations

import asyncio
import time

import structlog

from libs.bus import Bus
from libs.bus.kv import TypedKV
from schemas import KeyStanding, subjects

log = structlog.get_logger()


class Standings:
    def __init__(self, bus: Bus):
        self.bus = bus
        self._kv: TypedKV[KeyStanding] | None = None
        self._local: dict[str, KeyStanding] = {}
        self._lock = asyncio.Lock()
        self._retry_at = 0.0

    async def _changed(self, key: str, value: KeyStanding | None) -> None:
        if value is None:
            self._local.pop(key, None)
        else:
            self._local[key] = value

    async def kv(self) -> TypedKV[KeyStanding] | None:
        # Opened on first use (tests run the app without lifespan); without JetStream, keys stay usable.
        async with self._lock:
            if self._kv is None and time.monotonic() >= self._retry_at:
                try:
                    kv = await self.bus.kv(subjects.STANDING_BUCKET, KeyStanding)
                    await kv.watch(self._changed)
                    self._kv = kv
                except Exception as e:
                    self._retry_at = time.monotonic() + 30
                    log.warning("key standing unavailable", error=str(e))
        return self._kv

    async def get(self, key_id: str) -> KeyStanding | None:
        await self.kv()
        return self._local.get(key_id)

    def all(self) -> list[KeyStanding]:
        return sorted(self._local.values(), key=lambda s: -s.since_ms)
