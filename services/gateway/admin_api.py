"""Operator routes (admin key): request list, dashboard stats, dataset exports, replay, and the console page."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from schemas import (
    ErrorCode,
    PreferenceList,
    PreferenceQuery,
    ReplayRequest,
    RequestExport,
    RequestList,
    RequestListQuery,
    Stats,
    StatsQuery,
)
from schemas.records import ADMIN_PREFERENCES_EXPORT, ADMIN_REQUESTS_EXPORT, ADMIN_REQUESTS_LIST, ADMIN_STATS
from services.gateway.admin_replay import replay
from services.gateway.auth import authenticate_admin
from services.gateway.body import read_json
from services.gateway.core import Gateway, gateway
from services.gateway.errors import ApiError

router = APIRouter()
STATIC = Path(__file__).parent / "static"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration_s(raw: str) -> int:
    """`90`, `15m`, `1h`, `7d` → seconds."""
    m = _DURATION.match(raw.strip().lower())
    if not m:
        raise ApiError(ErrorCode.bad_request, f"bad duration {raw!r}: use seconds or 15m, 1h, 7d")
    return int(float(m.group(1)) * _UNIT_S[m.group(2)])


def parse_time_ms(raw: str | None) -> int | None:
    """Epoch milliseconds, or ISO 8601 (UTC when it names no zone)."""
    if raw is None or raw == "":
        return None
    if raw.isdigit():
        return int(raw)
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as e:
        raise ApiError(ErrorCode.bad_request, f"bad time {raw!r}: use epoch ms or ISO 8601") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def list_query(request: Request) -> RequestListQuery:
    p = request.query_params
    replays = p.get("replays")
    values: dict[str, Any] = {
        k: p.get(k) or None for k in ("tenant", "status", "model", "api", "mode", "safety_action", "replay_of")
    }
    values |= {
        "replays": None if replays in (None, "") else replays.lower() in ("1", "true", "yes"),
        "since_ms": parse_time_ms(p.get("since")),
        "until_ms": parse_time_ms(p.get("until")),
        "cursor": p.get("cursor") or None,
    }
    if p.get("limit"):
        values["limit"] = p.get("limit")
    try:
        return RequestListQuery.model_validate(values)
    except ValidationError as e:
        raise ApiError(ErrorCode.bad_request, f"invalid filter: {e.errors()[0]['msg']}") from e


async def ask(gw: Gateway, subject: str, query: BaseModel, reply: type[Any], timeout: float = 10.0) -> Any:
    return await gw.bus.request(subject, query, reply, timeout=timeout)


@router.get("/v1/admin/requests")
async def list_requests(request: Request) -> JSONResponse:
    gw = gateway(request)
    await authenticate_admin(request, gw.keys)
    got: RequestList = await ask(gw, ADMIN_REQUESTS_LIST, list_query(request), RequestList)
    return JSONResponse(got.model_dump(mode="json"))


@router.get("/v1/admin/stats")
async def stats(request: Request) -> JSONResponse:
    gw = gateway(request)
    await authenticate_admin(request, gw.keys)
    p = request.query_params
    try:
        q = StatsQuery(
            window_s=parse_duration_s(p.get("window") or "1h"),
            bucket_s=parse_duration_s(p["bucket"]) if p.get("bucket") else None,
            tenant=p.get("tenant") or None,
            include_replays=(p.get("replays") or "").lower() in ("1", "true", "yes"),
            until_ms=parse_time_ms(p.get("until")),
        )
    except ValidationError as e:
        raise ApiError(ErrorCode.bad_request, f"invalid stats query: {e.errors()[0]['msg']}") from e
    got: Stats = await ask(gw, ADMIN_STATS, q, Stats)
    return JSONResponse(got.model_dump(mode="json"))


async def _jsonl_requests(gw: Gateway, q: RequestListQuery, limit: int | None) -> AsyncIterator[bytes]:
    sent = 0
    while True:
        page: RequestExport = await ask(gw, ADMIN_REQUESTS_EXPORT, q, RequestExport, timeout=30.0)
        for item in page.items:
            if limit is not None and sent >= limit:
                return
            yield (json.dumps(item, ensure_ascii=False) + "\n").encode()
            sent += 1
        if not page.next_cursor:
            return
        q = q.model_copy(update={"cursor": page.next_cursor})


@router.get("/v1/admin/export/requests")
async def export_requests(request: Request) -> StreamingResponse:
    """Logged requests as JSONL (newest first), with the same filters as the list; `max` caps the count."""
    gw = gateway(request)
    await authenticate_admin(request, gw.keys)
    q = list_query(request).model_copy(update={"limit": 50, "cursor": None})
    cap = request.query_params.get("max")
    first: RequestExport = await ask(gw, ADMIN_REQUESTS_EXPORT, q.model_copy(update={"limit": 1}), RequestExport)
    del first  # fail before the 200 when the logger is away
    return StreamingResponse(
        _jsonl_requests(gw, q, int(cap) if cap and cap.isdigit() else None), media_type="application/x-ndjson"
    )


async def _jsonl_preferences(gw: Gateway, q: PreferenceQuery) -> AsyncIterator[bytes]:
    while True:
        page: PreferenceList = await ask(gw, ADMIN_PREFERENCES_EXPORT, q, PreferenceList, timeout=30.0)
        for item in page.items:
            yield (item.model_dump_json() + "\n").encode()
        if not page.next_cursor:
            return
        q = q.model_copy(update={"cursor": page.next_cursor})


@router.get("/v1/admin/export/preferences")
async def export_preferences(request: Request) -> StreamingResponse:
    """Preference pairs as JSONL: prompt, chosen, rejected (and both rids)."""
    gw = gateway(request)
    await authenticate_admin(request, gw.keys)
    q = PreferenceQuery(tenant=request.query_params.get("tenant") or None, limit=100)
    await ask(gw, ADMIN_PREFERENCES_EXPORT, q.model_copy(update={"limit": 1}), PreferenceList)
    return StreamingResponse(_jsonl_preferences(gw, q), media_type="application/x-ndjson")


@router.post("/v1/admin/replay/{rid}")
async def replay_request(rid: str, request: Request) -> JSONResponse:
    gw = gateway(request)
    key = await authenticate_admin(request, gw.keys)
    empty = request.headers.get("content-length") in (None, "0") and "transfer-encoding" not in request.headers
    body = ReplayRequest() if empty else await read_json(request, ReplayRequest, gw.settings.max_body_bytes)
    result = await replay(gw, key, rid, body)
    return JSONResponse(result.model_dump(mode="json"))


# The console is static: the page asks for the admin key and calls the routes above, so serving it
# needs no key (it holds no data).
@router.get("/console", include_in_schema=False)
async def console() -> FileResponse:
    return FileResponse(STATIC / "console.html", media_type="text/html", headers={"Cache-Control": "no-cache"})


@router.get("/console/{name}", include_in_schema=False)
async def console_asset(name: str) -> FileResponse:
    if name not in ("console.js", "console.css"):
        raise ApiError(ErrorCode.not_found, "no such route")
    media = "text/javascript" if name.endswith(".js") else "text/css"
    return FileResponse(STATIC / name, media_type=media, headers={"Cache-Control": "no-cache"})
