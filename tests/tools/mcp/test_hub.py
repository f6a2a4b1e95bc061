"""The MCP hub against the SDK's own FastMCP server: over streamable HTTP in its own process, and over
stdio inside the code sandbox. Listing, names kept safe, calls and their bounds (time, bytes), a server
that errors, hangs or dies, and the sandbox's walls around a stdio server."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator

import pytest

from switchyard.libs.tools.mcp import McpHub
from switchyard.libs.tools.sandbox import Sandbox
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolCall, ToolContext, ToolResult
from switchyard.schemas import McpCall, McpServerEntry, McpServerSpec
from tests.tools.mcp.servers import demo_http, stdio_spec

CTX = ToolContext(tenant="acme", user="ann", rid="r1")


@pytest.fixture(scope="module")
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with demo_http() as served:
        yield served


async def registered(hub: McpHub, *specs: McpServerSpec) -> None:
    for n, spec in enumerate(specs, start=1):
        await hub.changed(spec.key, McpServerEntry(spec=spec, created_ms=n, updated_ms=n))
    listed = await hub.wait_listed(lambda: all(s.state.listed_ms for s in hub.servers.values()), 60)
    assert listed, hub.status()


@pytest.fixture
async def hub(http_server: tuple[str, subprocess.Popen[bytes]]) -> AsyncIterator[McpHub]:
    settings = ToolSettings()
    h = McpHub(settings, Sandbox(settings))
    spec = McpServerSpec(name="inventory", transport="http", url=http_server[0], timeout_s=3, max_result_bytes=1000)
    await registered(h, spec)
    yield h
    await h.close()


async def call(hub: McpHub, name: str, args: dict[str, object], ctx: ToolContext = CTX) -> tuple[ToolResult, McpCall]:
    return await hub.run_one(ToolCall(id="call_1", name=name, arguments=args), ctx)


async def test_a_server_s_tools_are_listed_namespaced_and_unsafe_names_are_skipped(hub: McpHub) -> None:
    state = hub.status().servers[0]
    assert state.error is None
    names = {t.name for t in state.tools}
    assert {"inventory__lookup_stock", "inventory__slow_report", "inventory__fail"} <= names
    assert state.skipped == ["unsafe.name"] and not any("." in n for n in names)
    specs = {s["name"]: s for s in hub.specs("acme")}
    assert specs["inventory__lookup_stock"]["parameters"]["required"] == ["sku"]
    assert "in stock" in specs["inventory__lookup_stock"]["description"]


async def test_a_call_returns_the_server_s_answer_and_a_record(hub: McpHub) -> None:
    result, record = await call(hub, "inventory__lookup_stock", {"sku": "a-100"})
    assert result.status == "ok" and "42 units" in result.output
    assert record.server == "inventory" and record.transport == "http" and record.status == "ok"
    assert record.result_bytes > 0 and not record.truncated


async def test_a_tool_error_is_an_error_result(hub: McpHub) -> None:
    result, record = await call(hub, "inventory__fail", {"reason": "no stock"})
    assert result.status == "error" and "refused: no stock" in result.output
    assert record.status == "error"


async def test_a_hanging_tool_costs_its_timeout_and_nothing_more(hub: McpHub) -> None:
    result, record = await call(hub, "inventory__slow_report", {"topic": "q3"})
    assert result.status == "timeout" and "did not answer within 3s" in result.output
    assert 2900 <= record.duration_ms < 4500, record


async def test_a_flood_is_cut_at_the_byte_cap_not_read_to_the_end(hub: McpHub) -> None:
    result, record = await call(hub, "inventory__flood", {"size": 2_000_000})
    assert result.status == "error" and "passed" in result.output and "bytes" in result.output
    assert record.result_bytes < 400_000 and record.duration_ms < 3000, record


async def test_a_long_answer_under_the_cap_is_cut_to_the_server_s_result_bytes(hub: McpHub) -> None:
    result, record = await call(hub, "inventory__flood", {"size": 5000})
    assert result.status == "ok" and record.truncated and "cut at 1000 bytes" in result.output


async def test_tenants_see_global_servers_and_their_own_only(hub: McpHub, http_server: tuple[str, object]) -> None:
    own = McpServerSpec(name="stock", tenant="acme", transport="http", url=http_server[0], timeout_s=3)
    await registered(hub, own)
    assert any(s["name"] == "stock__lookup_stock" for s in hub.specs("acme"))
    assert not any(s["name"].startswith("stock__") for s in hub.specs("globex"))
    result, _ = await call(
        hub, "stock__lookup_stock", {"sku": "C-300"}, ToolContext(tenant="globex", user="x", rid="r")
    )
    assert result.status == "error" and "no MCP tool" in result.output
    await hub.changed(own.key, None)
    assert not any(s["name"].startswith("stock__") for s in hub.specs("acme"))


async def test_a_server_that_died_is_one_error_and_listing_keeps_its_last_tools() -> None:
    settings = ToolSettings()
    hub = McpHub(settings, Sandbox(settings))
    with demo_http() as (url, proc):
        spec = McpServerSpec(name="fragile", transport="http", url=url, timeout_s=3)
        await registered(hub, spec)
        proc.kill()
        proc.wait()
    result, record = await call(hub, "fragile__lookup_stock", {"sku": "A-100"})
    assert result.status == "error" and record.error and "ConnectError" in record.error, record
    await hub.refresh(spec.key)
    state = hub.status().servers[0]
    assert state.error and any(t.name == "fragile__lookup_stock" for t in state.tools)
    await hub.close()


async def test_the_planner_calls_a_tool_the_message_names_with_its_argument(hub: McpHub) -> None:
    calls = await hub.plan("Please use inventory__lookup_stock for 'B-200'. Thanks!", "acme", 4)
    assert [(c.name, c.arguments) for c in calls] == [("inventory__lookup_stock", {"sku": "B-200"})]
    # A tool that needs two arguments is left for the model; small talk plans nothing.
    assert await hub.plan("hello there, how are you today?", "acme", 4) == []
    assert await hub.plan("use inventory__lookup_stock", "acme", 0) == []


@pytest.fixture(scope="module")
async def isolated() -> bool:
    return await Sandbox(ToolSettings()).isolation_available()


async def test_a_stdio_server_runs_in_the_sandbox_without_network_or_the_repository(isolated: bool) -> None:
    if not isolated:
        pytest.skip("no namespaces here: stdio MCP servers do not run without the sandbox's isolation")
    settings = ToolSettings()
    hub = McpHub(settings, Sandbox(settings))
    await registered(hub, stdio_spec(timeout_s=20, max_result_bytes=1000))
    assert any(t.name == "local__lookup_stock" for t in hub.status().servers[0].tools), hub.status()
    result, record = await call(hub, "local__lookup_stock", {"sku": "C-300"})
    assert result.status == "ok" and "7 units" in result.output and record.transport == "stdio"
    walls, _ = await call(hub, "local__whoami", {})
    assert walls.status == "ok", walls.output
    assert "uid=0" not in walls.output and "network: reachable" not in walls.output
    assert "repository hidden" in walls.output
    flood, record = await call(hub, "local__flood", {"size": 3_000_000})
    assert flood.status == "error" and "passed" in flood.output, flood.output
    await hub.close()


async def test_stdio_servers_refuse_to_run_unisolated(isolated: bool) -> None:
    settings = ToolSettings()
    hub = McpHub(settings, Sandbox(settings))
    hub.sandbox._isolation = False  # as on a host without namespaces
    await registered(hub, stdio_spec(timeout_s=5))
    assert "isolation" in (hub.status().servers[0].error or "")
    await hub.close()
