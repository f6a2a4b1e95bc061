"""Key standing: the logger suspends abusive keys, every gateway enforces it, an admin reinstates.

The gateway keeps a local copy of the `key_standing` bucket through a watch, so checking a key on
every request costs no round trip."""

from __future__ import annotations

import asyncio
import time

import structlog
from fastapi import APIRouter, Request

from libs.bus import Bus
from libs.bus.headers import now_ms
from libs.bus.kv import TypedKV
from schemas import ErrorCode, KeyStanding, subjects
from services.gateway.auth import authenticate_admin
from services.gateway.errors import ApiError

log = structlog.get_logger()
router = APIRouter()


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


def standings(request: Request) -> Standings:
    return request.app.state.gateway.standings  # type: ignore[no-any-return]


@router.get("/v1/admin/keys/standing")
async def list_standing(request: Request) -> dict[str, object]:
    await authenticate_admin(request, request.app.state.gateway.keys)
    st = standings(request)
    await st.kv()
    return {"data": [s.model_dump() for s in st.all()]}


@router.post("/v1/admin/keys/{key_id}/reinstate")
async def reinstate(key_id: str, request: Request) -> dict[str, object]:
    keys = request.app.state.gateway.keys
    await authenticate_admin(request, keys)
    # Only a key the store knows: anything else (a typo, a non-ASCII id the bucket could not even name)
    # is 404 and writes nothing.
    if key_id not in {k.id for k in await keys.list()}:
        raise ApiError(ErrorCode.not_found, f"no API key with id {key_id!r}")
    kv = await standings(request).kv()
    if kv is None:
        raise ApiError(ErrorCode.unavailable, "key standing store is unavailable")
    standing = KeyStanding(key_id=key_id, state="active", reason="reinstated by an admin", since_ms=now_ms())
    await kv.put(key_id, standing)
    return standing.model_dump()
