"""The MCP servers this tools replica knows (the registrations it watches), the tools each offers, and the
calls to them: planned from the user's message, each under its server's time and byte limits, traced,
and never raising. A server that hangs, errors or dies costs that call an error result, nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opentelemetry import trace

from switchyard.libs.tools.mcp.connect import Meter, result_text, session
from switchyard.libs.tools.mcp.plan import PlannableTool, description_text, match
from switchyard.libs.tools.planner import split_clauses
from switchyard.libs.tools.runner import truncate
from switchyard.libs.tools.sandbox import Sandbox
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolCall, ToolContext, ToolResult
from switchyard.schemas.mcp import (
    MAX_DESCRIPTION_CHARS,
    MAX_SCHEMA_BYTES,
    McpCall,
    McpServerEntry,
    McpServerSpec,
    McpServerState,
    McpStatus,
    McpToolSpec,
    namespaced,
    split_name,
)

log = logging.getLogger(__name__)
EmbedMany = Callable[[list[str]], Awaitable[list[np.ndarray]]]
# Room for the handshake and the JSON envelope around a result (escaping can double text).
ENVELOPE_BYTES = 65_536


def _now_ms() -> int:
    return int(time.time() * 1000)


def _reason(e: BaseException) -> str:
    """The innermost cause of a failure, in one short line (anyio wraps them in exception groups)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    text = str(e).splitlines()[0][:200] if str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _cut(text: str, max_bytes: int) -> tuple[str, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    return raw[:max_bytes].decode("utf-8", "ignore") + f"\n[... cut at {max_bytes} bytes]", True


@dataclass
class Server:
    entry: McpServerEntry
    state: McpServerState
    tools: list[PlannableTool] = field(default_factory=list)

    @property
    def spec(self) -> McpServerSpec:
        return self.entry.spec


class McpHub:
    def __init__(
        self,
        settings: ToolSettings,
        sandbox: Sandbox,
        embed_many: EmbedMany | None = None,
        tracer: trace.Tracer | None = None,
        replica: str = "",
    ):
        self.settings = settings
        self.sandbox = sandbox
        self.embed_many = embed_many
        self.tracer = tracer or trace.get_tracer("switchyard.tools.mcp")
        self.replica = replica
        self.servers: dict[str, Server] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self._listed = asyncio.Condition()

    # -- registrations ---------------------------------------------------------------------------
    async def changed(self, key: str, entry: McpServerEntry | None) -> None:
        """The bucket's watch: a registration added, replaced or removed."""
        if entry is None or entry.spec.key != key:
            self.servers.pop(key, None)
            async with self._listed:
                self._listed.notify_all()
            return
        old = self.servers.get(key)
        state = McpServerState(key=key, updated_ms=entry.updated_ms)
        self.servers[key] = Server(entry=entry, state=state, tools=old.tools if old else [])
        if entry.spec.enabled:
            self._spawn(self.refresh(key))

    def _spawn(self, work: Awaitable[Any]) -> None:
        self._keep(asyncio.ensure_future(work))

    def _keep(self, task: asyncio.Future[Any]) -> None:
        """Hold a task that finishes on its own (a listing, a cancelled call's teardown) until it has."""
        self._background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("MCP background task ended: %s", _reason(task.exception()))  # type: ignore[arg-type]

    async def refresh(self, key: str) -> None:
        """List the server's tools again (bounded by its listing limits) and embed their descriptions."""
        server = self.servers.get(key)
        if server is None:
            return
        spec = server.spec
        meter = Meter(cap=self.settings.mcp_list_max_bytes)
        state = McpServerState(key=key, updated_ms=server.entry.updated_ms, listed_ms=_now_ms())
        tools: list[PlannableTool] = server.tools
        try:
            listed = await asyncio.wait_for(self._list(spec, meter), self.settings.mcp_list_timeout_s)
            state.tools, state.skipped = self._accept(spec.name, listed)
            tools = [PlannableTool(t, None) for t in state.tools]
            await self._embed(tools)
        except TimeoutError:
            state.error = f"listing its tools took over {self.settings.mcp_list_timeout_s:g}s"
        except Exception as e:
            state.error = f"the response passed {meter.cap} bytes" if meter.exceeded else _reason(e)
            log.warning("MCP server %s: listing failed: %s", spec.name, state.error)
        if state.error is not None:  # keep what it offered last: a call to it now fails as one tool error
            state.tools = [t.spec for t in tools]
        current = self.servers.get(key)
        if current is not None and current.entry is server.entry:
            current.state, current.tools = state, tools
        async with self._listed:
            self._listed.notify_all()

    async def _list(self, spec: McpServerSpec, meter: Meter) -> list[Any]:
        isolated = await self._isolation(spec)
        found: list[Any] = []
        async with session(spec, self.settings, meter, isolated=isolated) as s:
            cursor: str | None = None
            while len(found) < self.settings.mcp_max_tools_per_server * 2:
                page = await s.list_tools(cursor=cursor) if cursor else await s.list_tools()
                found.extend(page.tools)
                cursor = page.nextCursor
                if not cursor:
                    break
        return found

    def _accept(self, server: str, listed: list[Any]) -> tuple[list[McpToolSpec], list[str]]:
        """The tools whose names and schemas are safe to use, and the names of those that are not."""
        kept: list[McpToolSpec] = []
        skipped: list[str] = []
        for t in listed:
            raw = str(getattr(t, "name", ""))[:80]
            schema = getattr(t, "inputSchema", None) or {}
            try:
                name = namespaced(server, raw)
            except ValueError:
                skipped.append(raw)
                continue
            if len(json.dumps(schema)) > MAX_SCHEMA_BYTES or len(kept) >= self.settings.mcp_max_tools_per_server:
                skipped.append(raw)
                continue
            desc = (getattr(t, "description", None) or "")[:MAX_DESCRIPTION_CHARS]
            kept.append(McpToolSpec(name=name, server=server, tool=raw, description=desc, input_schema=schema))
        return kept, skipped

    async def _embed(self, tools: list[PlannableTool]) -> None:
        if self.embed_many is None or not tools:
            return
        vectors = await self.embed_many([description_text(t.spec) for t in tools])
        if len(vectors) == len(tools):
            for t, v in zip(tools, vectors, strict=True):
                t.vector = v

    async def refresh_all(self) -> None:
        await asyncio.gather(*(self.refresh(k) for k, s in list(self.servers.items()) if s.spec.enabled))

    async def keep_fresh(self) -> None:
        """List every server's tools again every `mcp_refresh_s` (a server may add or drop tools)."""
        while True:
            await asyncio.sleep(self.settings.mcp_refresh_s)
            await self.refresh_all()

    async def wait_listed(self, done: Callable[[], bool], timeout_s: float) -> bool:
        try:
            async with self._listed:
                await asyncio.wait_for(self._listed.wait_for(done), timeout_s)
        except TimeoutError:
            return False
        return True

    # -- what a tenant sees ----------------------------------------------------------------------
    def visible(self, tenant: str) -> dict[str, Server]:
        """The enabled servers a tenant's requests use, by name: its own over a global one of the same name."""
        out: dict[str, Server] = {}
        for s in self.servers.values():
            if s.spec.enabled and s.spec.tenant is None:
                out[s.spec.name] = s
        for s in self.servers.values():
            if s.spec.enabled and s.spec.tenant == tenant:
                out[s.spec.name] = s
        return out

    def specs(self, tenant: str) -> list[dict[str, Any]]:
        """`GET /v1/tools` entries: each tool as a function the model could be given."""
        return [
            {"name": t.spec.name, "description": t.spec.description, "parameters": t.spec.input_schema}
            for s in self.visible(tenant).values()
            for t in s.tools
        ]

    def status(self) -> McpStatus:
        return McpStatus(replica=self.replica, servers=[s.state for s in self.servers.values()])

    # -- planning ---------------------------------------------------------------------------------
    async def plan(self, text: str, tenant: str, limit: int) -> list[ToolCall]:
        """The MCP calls the user's own message asks for (at most `limit`)."""
        tools = [t for s in self.visible(tenant).values() if s.spec.plan for t in s.tools]
        if not tools or limit <= 0:
            return []
        clauses = split_clauses(text)[:16]
        vectors: list[np.ndarray] = []
        if self.embed_many is not None and any(t.vector is not None for t in tools) and clauses:
            vectors = await self.embed_many(clauses)
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for spec, args in match(clauses, vectors, tools, self.settings.mcp_similarity):
            key = spec.name + json.dumps(args, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            calls.append(ToolCall(id="call_" + uuid.uuid4().hex[:16], name=spec.name, arguments=args))
            if len(calls) >= limit:
                break
        return calls

    def owns(self, name: str, tenant: str) -> bool:
        parts = split_name(name)
        return parts is not None and parts[0] in self.visible(tenant)

    # -- calls ------------------------------------------------------------------------------------
    async def run(self, calls: list[ToolCall], ctx: ToolContext) -> list[tuple[ToolResult, McpCall]]:
        return list(await asyncio.gather(*(self.run_one(c, ctx) for c in calls)))

    async def run_one(self, call: ToolCall, ctx: ToolContext) -> tuple[ToolResult, McpCall]:
        start = time.perf_counter()
        parts = split_name(call.name)
        server = self.visible(ctx.tenant).get(parts[0]) if parts else None
        transport = server.spec.transport if server else "http"
        with self.tracer.start_as_current_span(
            f"execute_tool {call.name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
                "mcp.server": parts[0] if parts else "",
                "mcp.transport": transport,
            },
        ) as span:
            err: str | None
            if server is None or parts is None:
                err = f"no MCP tool {call.name!r} for this tenant"
                status, text, structured, meter = "error", err, None, Meter(0)
            else:
                status, text, structured, meter, err = await self._bounded_call(server.spec, parts[1], call)
            text, cut = _cut(text, server.spec.max_result_bytes if server else 1024)
            # What reaches the prompt is bounded as every tool's result is.
            text = truncate(text, self.settings.max_output_chars)
            span.set_attribute("mcp.status", status)
            span.set_attribute("mcp.result_bytes", meter.received)
            if status != "ok":
                span.set_status(trace.StatusCode.ERROR, err or status)
        duration = round((time.perf_counter() - start) * 1000, 2)
        result = ToolResult(
            call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            status=status,
            output=text,
            data=structured,
            duration_ms=duration,
        )
        record = McpCall(
            id=call.id,
            name=call.name,
            server=parts[0] if parts else "",
            transport=transport,
            status=status,  # type: ignore[arg-type]
            duration_ms=duration,
            result_bytes=meter.received,
            truncated=cut,
            error=err,
        )
        return result, record

    async def _bounded_call(
        self, spec: McpServerSpec, tool: str, call: ToolCall
    ) -> tuple[str, str, Any, Meter, str | None]:
        """(status, text, structured content, meter, error) of one call, within the server's limits."""
        meter = Meter(cap=spec.max_result_bytes * 2 + ENVELOPE_BYTES)
        task = asyncio.ensure_future(self._call(spec, tool, call.arguments, meter))
        tripped = asyncio.ensure_future(meter.tripped.wait())
        try:
            await asyncio.wait({task, tripped}, timeout=spec.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            self._keep(task)
            raise
        finally:
            tripped.cancel()
        if not task.done() and meter.exceeded:
            task.cancel()
            self._keep(task)
            why = f"the response passed {meter.cap} bytes"
            return "error", f"{call.name} failed: {why}", None, meter, why
        if not task.done():
            # Its teardown (closing the session, ending a stdio server's sandbox) finishes in the
            # background: the request does not wait on a server that does not answer.
            task.cancel()
            self._keep(task)
            msg = f"{call.name} did not answer within {spec.timeout_s:g}s"
            return "timeout", msg, None, meter, msg
        e = task.exception()
        if e is not None:
            why = f"the response passed {meter.cap} bytes" if meter.exceeded else _reason(e)
            log.warning("MCP call %s failed: %s", call.name, why)
            return "error", f"{call.name} failed: {why}", None, meter, why
        text, structured, is_error = task.result()
        meter.received = meter.received or len(text.encode("utf-8"))
        if is_error:
            return "error", text or f"{call.name} reported an error", structured, meter, (text or "")[:200]
        return "ok", text, structured, meter, None

    async def _call(self, spec: McpServerSpec, tool: str, args: dict[str, Any], meter: Meter) -> tuple[str, Any, bool]:
        isolated = await self._isolation(spec)
        async with session(spec, self.settings, meter, isolated=isolated) as s:
            result = await s.call_tool(tool, dict(args))
        text, structured = result_text(result)
        return text, structured, bool(result.isError)

    async def _isolation(self, spec: McpServerSpec) -> bool:
        if spec.transport != "stdio":
            return False
        isolated = await self.sandbox.isolation_available()
        if not isolated and not self.settings.allow_unisolated_code:
            raise RuntimeError("stdio MCP servers run only inside the sandbox, and isolation is unavailable here")
        return isolated

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._background, return_exceptions=True), 5.0)
