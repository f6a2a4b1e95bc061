"""`/v1/admin/mcp-servers`: the MCP servers whose tools the pipeline may call (the app includes `admin_router`
behind the admin guard).

A registration is one entry in the bus's key-value bucket `subjects.MCP_BUCKET`, which every tools replica
watches (as the model registry is kept): a change is live at every replica within one watch delivery,
survives restarts with JetStream, and needs no database the tools service does not otherwise have. What a
server offers is what a tools replica found when it listed the server's tools, asked over
`subjects.TOOLS_MCP_STATUS`."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, Path, Query

from switchyard.libs.bus import BusError
from switchyard.libs.bus.kv import TypedKV, open_bucket
from switchyard.schemas import (
    ErrorBody,
    ErrorCode,
    McpServerEntry,
    McpServerList,
    McpServerSpec,
    McpServerState,
    McpServerView,
    McpStatus,
    McpStatusQuery,
    subjects,
)
from switchyard.schemas.mcp import MASK, MCP_SERVER_PATTERN, scope_key
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw
from switchyard.services.gateway.errors import ApiError

admin_router = APIRouter()
ServerName = Annotated[str, Path(min_length=1, max_length=24, pattern=MCP_SERVER_PATTERN)]
TenantQuery = Annotated[
    str | None, Query(min_length=1, max_length=128, description="the tenant's registration; absent: the global one")
]
STATUS_ASK_S = 2.0
# After a registration, how long the answer waits for a tools replica to have listed the server's tools.
LISTED_WAIT_S = 15.0
ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorBody},
    404: {"model": ErrorBody},
    503: {"model": ErrorBody},
}


async def _bucket(gw: Gateway) -> TypedKV[McpServerEntry]:
    bus = gw.bus
    kv = await open_bucket(bus.js, subjects.MCP_BUCKET, None, bus.js_replicas)
    return TypedKV(kv, McpServerEntry, bus.js, subjects.MCP_BUCKET)


async def _states(gw: Gateway) -> dict[str, McpServerState] | None:
    """Each server's listing as one tools replica holds it; None when no tools replica answers."""
    try:
        reply = await gw.bus.request(subjects.TOOLS_MCP_STATUS, McpStatusQuery(), McpStatus, timeout=STATUS_ASK_S)
    except BusError:
        return None
    return {s.key: s for s in reply.servers}


def _keep_masked(spec: McpServerSpec, old: McpServerSpec) -> McpServerSpec:
    """A header or environment value sent back as the mask (`***`, as the list shows it) keeps the stored
    value, so an edit need not re-enter credentials it cannot read."""
    headers = {k: old.headers.get(k, v) if v == MASK else v for k, v in spec.headers.items()}
    env = {k: old.env.get(k, v) if v == MASK else v for k, v in spec.env.items()}
    return spec.model_copy(update={"headers": headers, "env": env})


def _view(entry: McpServerEntry, state: McpServerState | None) -> McpServerView:
    spec = entry.spec
    view = McpServerView(
        key=spec.key, spec=spec.shown(), created_ms=entry.created_ms, updated_ms=entry.updated_ms, state="unknown"
    )
    if not spec.enabled:
        view.state = "disabled"
    elif state is not None and state.listed_ms:
        view.state = "error" if state.error else "ready"
        view.error = state.error
    if state is not None:
        view.tools, view.skipped = state.tools, state.skipped
    return view


@admin_router.get("/v1/admin/mcp-servers", response_model=McpServerList, responses=ERRORS)
async def list_servers(gw: Gw, tenant: TenantQuery = None) -> McpServerList:
    """Every registration (or a tenant's and the global ones), credentials masked, with the tools each offers."""
    entries = await (await _bucket(gw)).items()
    states = await _states(gw) or {}
    views = [
        _view(e, states.get(k)) for k, e in sorted(entries.items()) if tenant is None or e.spec.tenant in (None, tenant)
    ]
    return McpServerList(data=views)


@admin_router.post("/v1/admin/mcp-servers", status_code=201, response_model=McpServerView, responses=ERRORS)
async def register_server(gw: Gw, body: Annotated[McpServerSpec, json_body(McpServerSpec)]) -> McpServerView:
    """Registers a server (or replaces the registration of the same name and tenant), then waits a few seconds
    for a tools replica to list its tools: the answer says what it found (`state` ready or error), or
    `unknown` when no tools replica has listed it yet."""
    kv = await _bucket(gw)
    old = await kv.get(body.key)
    if old is not None:
        body = _keep_masked(body, old.spec)
    now = int(time.time() * 1000)
    updated = max(now, old.updated_ms + 1) if old else now
    entry = McpServerEntry(spec=body, created_ms=old.created_ms if old else now, updated_ms=updated)
    await kv.put(body.key, entry)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (LISTED_WAIT_S if body.enabled else 0.0)
    while True:
        states = await _states(gw)
        state = (states or {}).get(body.key)
        listed = state is not None and state.updated_ms == updated and state.listed_ms > 0
        if listed or states is None or loop.time() >= deadline:
            break
        await asyncio.sleep(0.2)  # the replica lists it in the background: ask again shortly
    return _view(entry, state if listed else None)


@admin_router.delete("/v1/admin/mcp-servers/{name}", response_model=McpServerView, responses=ERRORS)
async def remove_server(name: ServerName, gw: Gw, tenant: TenantQuery = None) -> McpServerView:
    """Removes the registration: its tools leave `GET /v1/tools` and the planner at every tools replica."""
    kv = await _bucket(gw)
    key = scope_key(tenant, name)
    entry = await kv.get(key)
    if entry is None:
        whose = f"tenant {tenant!r}" if tenant is not None else "every tenant (global)"
        raise ApiError(ErrorCode.not_found, f"no MCP server {name!r} is registered for {whose}")
    await kv.delete(key)
    return _view(entry, None)
