"""API-key authentication as FastAPI dependencies: `Authorization: Bearer <key>` or `x-api-key: <key>`
(what the Anthropic SDK sends). `Principal` is the verified key of a request; `require_admin` guards the
admin router."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from switchyard.libs.bus.headers import now_ms
from switchyard.libs.store.key_admin import iso
from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.errors import ApiError


def presented_key(request: HTTPConnection) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = request.headers.get("x-api-key", "").strip()
    return key or None


async def authenticate(request: HTTPConnection, gw: Gw) -> ApiKey:
    raw = presented_key(request)
    if raw is None:
        raise ApiError(ErrorCode.unauthorized, "missing API key: send Authorization: Bearer <key> or x-api-key")
    await gw.key_policy.listen()  # before the cache is trusted: other gateways' revocations reach it
    key = await gw.keys.verify(raw)
    if key is None:
        # One message for unknown and revoked keys: the answer must not tell an attacker which it was.
        raise ApiError(ErrorCode.unauthorized, "invalid API key")
    if key.expired(now_ms()):
        # Only the holder of a once-valid key reads this, and knowing it expired tells them what to do.
        raise ApiError(ErrorCode.unauthorized, f"this API key expired at {iso(key.expires)}")
    if not key.admin:
        standing = await gw.standings.get(key.id)
        if standing is not None and standing.state == "suspended":
            raise ApiError(
                ErrorCode.forbidden, f"this API key is suspended: {standing.reason}. An admin can reinstate it."
            )
    return key


Principal = Annotated[ApiKey, Depends(authenticate)]


async def require_admin(key: Principal) -> ApiKey:
    if not key.admin:
        raise ApiError(ErrorCode.forbidden, "this route needs an admin key")
    return key


AdminKey = Annotated[ApiKey, Depends(require_admin)]
