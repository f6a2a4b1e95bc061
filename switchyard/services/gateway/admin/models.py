"""`/v1/admin/models`: models added and removed at run time (the app includes `admin_router` behind the admin
guard). The registry lives in the bus's key-value store (switchyard/libs/models/live.py); the stack supervisor,
the one process that starts processes, starts and stops the pools (switchyard/cli/pools.py), and this gateway
asks it over the bus and answers once the pool serves (a replica heartbeats) or is gone."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from switchyard.libs.bus import NobodyListens
from switchyard.libs.bus.kv import TypedKV, open_bucket
from switchyard.libs.models.admit import check_names
from switchyard.schemas import (
    ErrorCode,
    Heartbeat,
    ModelCard,
    ModelEntry,
    ModelEntryList,
    PoolReply,
    PoolStart,
    PoolStop,
    subjects,
)
from switchyard.schemas.models import MODEL_NAME_PATTERN
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw
from switchyard.services.gateway.errors import ApiError

admin_router = APIRouter()
ModelName = Annotated[str, Path(min_length=1, max_length=128, pattern=MODEL_NAME_PATTERN)]
# The supervisor lets a stopping pool's streams finish (up to its drain timeout) before it answers.
STOP_ASK_S = 60.0
# After the supervisor's answer, until this gateway's own watch has the change (one delivery, normally).
SEEN_S = 5.0
NO_SUPERVISOR = (
    "no supervisor to start pools: models are added and removed at run time only under `switchyard run` "
    "(`make run`); in this deployment change SWITCHYARD_MODELS and restart"
)


def _refused(reply: PoolReply) -> ApiError:
    try:
        code = ErrorCode(reply.code)
    except ValueError:
        code = ErrorCode.internal
    return ApiError(code, reply.message, details={"log_tail": reply.log_tail} if reply.log_tail else None)


async def _replicas(gw: Gateway) -> list[Heartbeat]:
    bus = gw.bus
    kv = await open_bucket(bus.js, subjects.REPLICAS_BUCKET, subjects.REPLICAS_TTL_S, bus.js_replicas)
    return list((await TypedKV(kv, Heartbeat, bus.js, subjects.REPLICAS_BUCKET).items()).values())


@admin_router.get("/v1/admin/models", response_model=ModelEntryList)
async def list_models(gw: Gw) -> ModelEntryList:
    """Every registry entry, and its pool's replicas that heartbeat now."""
    registry = gw.settings.registry
    beats = await _replicas(gw)
    default = registry.get(None).name
    entries = []
    for card in registry.models:
        replicas = [b for b in beats if b.pool == card.pool]
        state = "serving" if replicas else "no_replica"
        entries.append(ModelEntry(card=card, default=card.name == default, state=state, replicas=replicas))
    return ModelEntryList(data=entries)


@admin_router.post("/v1/admin/models", status_code=201, response_model=ModelCard)
async def add_model(gw: Gw, body: Annotated[ModelCard, json_body(ModelCard)]) -> ModelCard:
    """Adds `body` to the registry and starts its pool; answers once a replica of it serves (201 with the
    entry), else 400 (a bad entry: nothing was started) or 503 (no supervisor, or the pool did not come up,
    with the end of its log in `error.log_tail`; the entry was removed)."""
    try:
        check_names(body, gw.settings.registry)
    except ValueError as e:
        raise ApiError(ErrorCode.bad_request, str(e)) from e
    start_s = gw.settings.model_start_timeout_s
    try:
        reply = await gw.bus.request(
            subjects.POOLS_START, PoolStart(card=body, timeout_s=start_s), PoolReply, timeout=start_s + 30.0
        )
    except NobodyListens as e:
        raise ApiError(ErrorCode.unavailable, NO_SUPERVISOR) from e
    if not reply.ok or reply.card is None:
        raise _refused(reply)
    card = reply.card
    if gw.models is not None:
        await gw.models.wait_for(lambda r: r.find(card.name) is not None, SEEN_S)
    return card


@admin_router.delete("/v1/admin/models/{name}", response_model=ModelCard)
async def remove_model(name: ModelName, gw: Gw) -> ModelCard:
    """Removes the model from the registry (new requests for it: 404) and stops its pool once the requests it
    holds have finished; the removed entry."""
    if gw.settings.registry.find(name) is None:
        raise ApiError(ErrorCode.not_found, f"model {name!r} is not served; GET /v1/admin/models lists them")
    if gw.settings.registry.get(None).name == gw.settings.registry.get(name).name:
        raise ApiError(ErrorCode.bad_request, f"model {name!r} is the default model: it cannot be removed")
    try:
        reply = await gw.bus.request(subjects.POOLS_STOP, PoolStop(name=name), PoolReply, timeout=STOP_ASK_S)
    except NobodyListens as e:
        raise ApiError(ErrorCode.unavailable, NO_SUPERVISOR) from e
    if not reply.ok or reply.card is None:
        raise _refused(reply)
    card = reply.card
    if gw.models is not None:
        await gw.models.wait_for(lambda r: r.find(card.name) is None, SEEN_S)
    return card
