"""Operator routes (the app includes this router under the admin guard): request list, dashboard stats,
dataset exports, replay, and key standing. Query strings are pydantic models; a bad one is a 400."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, WithJsonSchema, model_validator

from switchyard.libs.bus.headers import now_ms
from switchyard.libs.store.key_admin import parse_time_ms
from switchyard.schemas import (
    ErrorCode,
    KeyStanding,
    PreferenceList,
    PreferenceQuery,
    ReplayRequest,
    ReplayResult,
    RequestExport,
    RequestList,
    RequestListQuery,
    Stats,
    StatsQuery,
)
from switchyard.schemas.subjects import (
    ADMIN_PREFERENCES_EXPORT,
    ADMIN_REQUESTS_EXPORT,
    ADMIN_REQUESTS_LIST,
    ADMIN_STATS,
)
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import AdminKey
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import KeyIdPath, RidPath
from switchyard.services.gateway.runs.rerun import rerun

router = APIRouter()
# The logger answers these from its store: a wide filter or a big page takes longer than a stage's reply.
ASK_S = 10.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration_s(raw: str) -> int:
    """`90`, `15m`, `1h`, `7d` → seconds."""
    m = _DURATION.match(raw.strip().lower())
    if not m:
        raise ValueError(f"bad duration {raw!r}: use seconds or 15m, 1h, 7d")
    return int(float(m.group(1)) * _UNIT_S[m.group(2)])


def _blank_is_none(parse: Any = None) -> BeforeValidator:
    """`?x=` asks for nothing, as leaving `x` out does; anything else goes through `parse`."""
    return BeforeValidator(lambda v: None if v in (None, "") else parse(v) if parse else v)


# Each as clients write it in a query string (the API document says so: times and durations are strings).
_TIME = {"type": "string", "description": "epoch milliseconds or ISO 8601 (UTC when no zone is named)"}
_DURATION_DOC = {"type": "string", "pattern": r"^\d+(\.\d+)?[smhdw]?$", "description": "90, 15m, 1h, 7d"}
Text = Annotated[str | None, _blank_is_none(), WithJsonSchema({"type": "string"})]
TimeMs = Annotated[int | None, _blank_is_none(parse_time_ms), WithJsonSchema(_TIME)]
Seconds = Annotated[int | None, _blank_is_none(parse_duration_s), WithJsonSchema(_DURATION_DOC)]
Flag = Annotated[
    bool | None, _blank_is_none(lambda v: str(v).lower() in ("1", "true", "yes")), WithJsonSchema({"type": "boolean"})
]


def _checked(query: Callable[[], BaseModel]) -> None:
    """Build the bus query the string becomes: what it refuses is a validation error of the query string."""
    try:
        query()
    except ValidationError as e:
        raise ValueError(e.errors()[0]["msg"]) from e


class RequestFilters(BaseModel):
    tenant: Text = None
    status: Text = None
    model: Text = None
    api: Text = None
    mode: Text = None
    safety_action: Text = None
    replay_of: Text = None
    replays: Flag = None
    since: TimeMs = None
    until: TimeMs = None
    cursor: Text = None
    limit: int | None = None

    def query(self) -> RequestListQuery:
        values = self.model_dump(exclude={"since", "until", "max"}, exclude_none=True)
        return RequestListQuery.model_validate({**values, "since_ms": self.since, "until_ms": self.until})

    @model_validator(mode="after")
    def _valid(self) -> RequestFilters:
        _checked(self.query)
        return self


class ExportFilters(RequestFilters):
    max: int | None = Field(None, ge=0)


class StatsParams(BaseModel):
    window: Seconds = None
    bucket: Seconds = None
    tenant: Text = None
    replays: Flag = None
    until: TimeMs = None

    def query(self) -> StatsQuery:
        return StatsQuery(
            window_s=self.window or 3600,
            bucket_s=self.bucket,
            tenant=self.tenant,
            include_replays=bool(self.replays),
            until_ms=self.until,
        )

    @model_validator(mode="after")
    def _valid(self) -> StatsParams:
        _checked(self.query)
        return self


@router.get("/v1/admin/requests", response_model=RequestList)
async def list_requests(gw: Gw, filters: Annotated[RequestFilters, Query()]) -> JSONResponse:
    got: RequestList = await gw.bus.request(ADMIN_REQUESTS_LIST, filters.query(), RequestList, timeout=ASK_S)
    return JSONResponse(got.model_dump(mode="json"))


@router.get("/v1/admin/stats", response_model=Stats)
async def stats(gw: Gw, params: Annotated[StatsParams, Query()]) -> JSONResponse:
    got: Stats = await gw.bus.request(ADMIN_STATS, params.query(), Stats, timeout=ASK_S)
    return JSONResponse(got.model_dump(mode="json"))


async def _jsonl_requests(gw: Gateway, q: RequestListQuery, limit: int | None) -> AsyncIterator[bytes]:
    sent = 0
    while True:
        page: RequestExport = await gw.bus.request(ADMIN_REQUESTS_EXPORT, q, RequestExport, timeout=30.0)
        for item in page.items:
            if limit is not None and sent >= limit:
                return
            yield (json.dumps(item, ensure_ascii=False) + "\n").encode()
            sent += 1
        if not page.next_cursor:
            return
        q = q.model_copy(update={"cursor": page.next_cursor})


@router.get("/v1/admin/export/requests", response_class=StreamingResponse, responses=route_docs.jsonl())
async def export_requests(gw: Gw, filters: Annotated[ExportFilters, Query()]) -> StreamingResponse:
    """Logged requests as JSONL (newest first), with the same filters as the list; `max` caps the count."""
    q = filters.query().model_copy(update={"limit": 50, "cursor": None})
    first: RequestExport = await gw.bus.request(
        ADMIN_REQUESTS_EXPORT, q.model_copy(update={"limit": 1}), RequestExport, timeout=ASK_S
    )
    del first  # fail before the 200 when the logger is away
    return StreamingResponse(_jsonl_requests(gw, q, filters.max), media_type="application/x-ndjson")


async def _jsonl_preferences(gw: Gateway, q: PreferenceQuery) -> AsyncIterator[bytes]:
    while True:
        page: PreferenceList = await gw.bus.request(ADMIN_PREFERENCES_EXPORT, q, PreferenceList, timeout=30.0)
        for item in page.items:
            yield (item.model_dump_json() + "\n").encode()
        if not page.next_cursor:
            return
        q = q.model_copy(update={"cursor": page.next_cursor})


@router.get("/v1/admin/export/preferences", response_class=StreamingResponse, responses=route_docs.jsonl())
async def export_preferences(gw: Gw, tenant: Annotated[Text, Query()] = None) -> StreamingResponse:
    """Preference pairs as JSONL: prompt, chosen, rejected (and both rids)."""
    q = PreferenceQuery(tenant=tenant, limit=100)
    await gw.bus.request(ADMIN_PREFERENCES_EXPORT, q.model_copy(update={"limit": 1}), PreferenceList, timeout=ASK_S)
    return StreamingResponse(_jsonl_preferences(gw, q), media_type="application/x-ndjson")


@router.post("/v1/admin/replay/{rid}", response_model=ReplayResult)
async def replay_request(
    rid: RidPath, gw: Gw, key: AdminKey, body: Annotated[ReplayRequest, json_body(ReplayRequest, optional=True)]
) -> JSONResponse:
    result = await rerun(gw, key, rid, body)
    return JSONResponse(result.model_dump(mode="json"))


class StandingList(BaseModel):
    data: list[KeyStanding]


@router.get("/v1/admin/keys/standing", response_model=None, responses=route_docs.body(StandingList))
async def list_standing(gw: Gw) -> dict[str, object]:
    await gw.standings.kv()
    return {"data": [s.model_dump() for s in gw.standings.all()]}


@router.post("/v1/admin/keys/{key_id}/reinstate", response_model=None, responses=route_docs.body(KeyStanding))
async def reinstate(key_id: KeyIdPath, gw: Gw) -> dict[str, object]:
    # Only a key the store knows: anything else (a typo, a non-ASCII id the bucket could not even name)
    # is 404 and writes nothing.
    if key_id not in {k.id for k in await gw.keys.list()}:
        raise ApiError(ErrorCode.not_found, f"no API key with id {key_id!r}")
    kv = await gw.standings.kv()
    if kv is None:
        raise ApiError(ErrorCode.unavailable, "key standing store is unavailable")
    standing = KeyStanding(key_id=key_id, state="active", reason="reinstated by an admin", since_ms=now_ms())
    await kv.put(key_id, standing)
    return standing.model_dump()
