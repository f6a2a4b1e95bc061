"""API-key authentication: `Authorization: Bearer <key>` or `x-api-key: <key>` (what the Anthropic SDK sends)."""

from __future__ import annotations

from fastapi import Request

from libs.store.keys import ApiKey, KeyStore
from schemas import ErrorCode
from services.gateway.errors import ApiError


def presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    key = request.headers.get("x-api-key", "").strip()
    return key or None


async def authenticate(request: Request, keys: KeyStore) -> ApiKey:
    raw = presented_key(request)
    if raw is None:
        raise ApiError(ErrorCode.unauthorized, "missing API key: send Authorization: Bearer <key> or x-api-key")
    key = await keys.verify(raw)
    if key is None:
        # One message for unknown and revoked keys: the answer must not tell an attacker which it was.
        raise ApiError(ErrorCode.unauthorized, "invalid API key")
    standings = getattr(getattr(request.app.state, "gateway", None), "standings", None)
    if standings is not None and not key.admin:
        standing = await standings.get(key.id)
        if standing is not None and standing.state == "suspended":
            raise ApiError(
                ErrorCode.forbidden, f"this API key is suspended: {standing.reason}. An admin can reinstate it."
            )
    request.state.key = key
    return key


async def authenticate_admin(request: Request, keys: KeyStore) -> ApiKey:
    key = await authenticate(request, keys)
    if not key.admin:
        raise ApiError(ErrorCode.forbidden, "this route needs an admin key")
    return key
