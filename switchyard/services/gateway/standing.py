"""Key standing: the logger suspends abusive keys, every gateway enforces it, an admin reinstates
(admin/requests.py).

The gateway keeps a local copy of the `key_standing` bucket through a watch, so checking a key on
every request costs no round trip."""

from __future__ import annotations

from switchyard.libs.bus import Bus
from switchyard.libs.bus.kv import TypedKV
from switchyard.schemas import KeyStanding, subjects
from switchyard.services.gateway.lazy import OpenedOnUse


class Standings:
    def __init__(self, bus: Bus):
        self.bus = bus
        # Without JetStream, keys stay usable (lazy.py).
        self._kv = OpenedOnUse(self._open, "key standing unavailable")
        self._local: dict[str, KeyStanding] = {}

    async def _changed(self, key: str, value: KeyStanding | None) -> None:
        if value is None:
            self._local.pop(key, None)
        else:
            self._local[key] = value

    async def _open(self) -> TypedKV[KeyStanding]:
        kv = await self.bus.kv(subjects.STANDING_BUCKET, KeyStanding)
        await kv.watch(self._changed)
        return kv

    async def kv(self) -> TypedKV[KeyStanding] | None:
        return await self._kv.get()

    async def get(self, key_id: str) -> KeyStanding | None:
        await self.kv()
        return self._local.get(key_id)

    def all(self) -> list[KeyStanding]:
        return sorted(self._local.values(), key=lambda s: -s.since_ms)
