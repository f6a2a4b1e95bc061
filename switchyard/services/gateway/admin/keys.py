"""`/v1/admin/keys`: API keys an operator manages over HTTP. The app includes `admin_router`
behind the admin guard. The work is switchyard/libs/store/key_admin.py's, the same code the `keys` CLI runs; every
change is announced to every gateway (key_policy.py), so a revoked or rotated secret is refused at once
everywhere."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, WithJsonSchema, model_validator

from switchyard.libs.bus.headers import now_ms
from switchyard.libs.limits.budget import resets_ms
from switchyard.libs.store.key_admin import (
    KeySecret,
    KeyUpdate,
    KeyView,
    NewKey,
    ResolveModel,
    TimeMs,
    create_key,
    iso,
    revoke_key,
    rotate_key,
    update_key,
)
from switchyard.schemas import ErrorCode
from switchyard.schemas.keys import KeyUsage, KeyUsageQuery
from switchyard.schemas.subjects import ADMIN_KEY_USAGE
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import KeyIdPath
from switchyard.services.gateway.key_policy import resolve_served

admin_router = APIRouter()
DAY_MS = 24 * 3600 * 1000
USAGE_ASK_S = 10.0
TenantQuery = Annotated[str | None, Query(max_length=128)]


def _missing(key_id: str) -> ApiError:
    return ApiError(ErrorCode.not_found, f"no live API key with id {key_id!r}")


def _bad(e: ValueError) -> ApiError:
    return ApiError(ErrorCode.bad_request, str(e))


def served_model(gw: Gateway) -> ResolveModel:
    """Names and aliases of the models this gateway serves now (chat pools and the embedding model)."""
    return lambda name: resolve_served(gw.settings.registry, name)


@admin_router.post("/v1/admin/keys", status_code=201, response_model=KeySecret)
async def create(gw: Gw, body: Annotated[NewKey, json_body(NewKey)]) -> KeySecret:
    """A new key; `key` (the secret) is in this response only."""
    try:
        return await create_key(gw.keys, body, now_ms(), gw.key_policy.announce, served_model(gw))
    except ValueError as e:
        raise _bad(e) from e


class KeyList(BaseModel):
    object: Literal["list"]
    data: list[KeyView]


@admin_router.get("/v1/admin/keys", response_model=KeyList)
async def list_keys(gw: Gw, tenant: TenantQuery = None) -> JSONResponse:
    now = now_ms()
    views = [KeyView.of(k, now).model_dump(mode="json") for k in await gw.keys.list(tenant or None)]
    return JSONResponse({"object": "list", "data": views})


async def _view(gw: Gateway, key_id: str) -> KeyView:
    key = await gw.keys.get(key_id)
    if key is None:
        raise ApiError(ErrorCode.not_found, f"no API key with id {key_id!r}")
    return KeyView.of(key, now_ms())


@admin_router.get("/v1/admin/keys/{key_id}", response_model=KeyView)
async def get_key(key_id: KeyIdPath, gw: Gw) -> KeyView:
    return await _view(gw, key_id)


@admin_router.patch("/v1/admin/keys/{key_id}", response_model=KeyView)
async def patch_key(key_id: KeyIdPath, gw: Gw, body: Annotated[KeyUpdate, json_body(KeyUpdate)]) -> KeyView:
    try:
        view = await update_key(gw.keys, key_id, body, now_ms(), gw.key_policy.announce, served_model(gw))
    except ValueError as e:
        raise _bad(e) from e
    if view is None:
        raise _missing(key_id)
    return view


async def _revoke(gw: Gateway, key_id: str) -> KeyView:
    view = await revoke_key(gw.keys, key_id, now_ms(), gw.key_policy.announce)
    if view is None:
        raise ApiError(ErrorCode.not_found, f"no API key with id {key_id!r}")
    return view


@admin_router.delete("/v1/admin/keys/{key_id}", response_model=KeyView)
async def delete_key(key_id: KeyIdPath, gw: Gw) -> KeyView:
    """Revokes the key (its row stays, for the records that name it); the same as POST .../revoke."""
    return await _revoke(gw, key_id)


@admin_router.post("/v1/admin/keys/{key_id}/revoke", response_model=KeyView)
async def revoke(key_id: KeyIdPath, gw: Gw) -> KeyView:
    return await _revoke(gw, key_id)


@admin_router.post("/v1/admin/keys/{key_id}/rotate", response_model=KeySecret)
async def rotate(key_id: KeyIdPath, gw: Gw) -> KeySecret:
    """A new secret for the key (same id, tenant, policy and usage); the old secret is refused at once."""
    try:
        got = await rotate_key(gw.keys, key_id, now_ms(), gw.key_policy.announce)
    except ValueError as e:
        raise _bad(e) from e
    if got is None:
        raise _missing(key_id)
    return got


# As clients write it in a query string (the API document says so).
_TIME = {"type": "string", "description": "epoch milliseconds or ISO 8601 (UTC when no zone is named)"}


class UsageParams(BaseModel):
    since: Annotated[TimeMs, WithJsonSchema(_TIME)] = None
    until: Annotated[TimeMs, WithJsonSchema(_TIME)] = None

    @model_validator(mode="after")
    def _window(self) -> UsageParams:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError("since must be before until")
        return self


class BudgetState(BaseModel):
    limit: int
    spent: int
    resets_at: str | None


class KeyUsageReply(KeyUsage):
    since_at: str | None
    until_at: str | None
    # The spend the gateways enforce (switchyard/libs/limits/budget.py), per budget the key has.
    budgets: dict[str, BudgetState]


async def _budgets(gw: Gateway, view: KeyView, now: int) -> dict[str, BudgetState]:
    limits = {"day": view.budget_tokens_per_day, "month": view.budget_tokens_per_month}
    if not any(limits.values()):
        return {}
    budgets = await gw.key_policy.budgets()
    spend = await budgets.spent(view.id, now) if budgets is not None else None
    return {
        period: BudgetState(
            limit=limit,
            spent=(spend.day if period == "day" else spend.month) if spend else 0,
            resets_at=iso(resets_ms("day" if period == "day" else "month", now)),
        )
        for period, limit in limits.items()
        if limit is not None
    }


@admin_router.get("/v1/admin/keys/{key_id}/usage", response_model=KeyUsageReply)
async def usage(key_id: KeyIdPath, gw: Gw, params: Annotated[UsageParams, Query()]) -> KeyUsageReply:
    """Tokens and requests from the request records, by model and by UTC day; the window defaults to the
    last 30 days."""
    view = await _view(gw, key_id)
    now = now_ms()
    until = params.until if params.until is not None else now + 1
    since = params.since if params.since is not None else until - 30 * DAY_MS
    q = KeyUsageQuery(key_id=key_id, since_ms=max(0, since), until_ms=until)
    got: KeyUsage = await gw.bus.request(ADMIN_KEY_USAGE, q, KeyUsage, timeout=USAGE_ASK_S)
    return KeyUsageReply(
        **got.model_dump(),
        since_at=iso(q.since_ms),
        until_at=iso(q.until_ms),
        budgets=await _budgets(gw, view, now),
    )
