"""The tools stage with MCP servers, on a real nats-server and the SDK's own MCP server: a registration in
the bus's key-value store reaches the stage; `tools.specs` lists its tools; a message that names one plans
and calls it, the `tool` events go out and the forwarded work carries the result in its prompt block; a
server that hangs costs one timeout event and the work still goes on. A request that offers an MCP tool as a
function is marked so, and a call the model wrote (`tools.mcp.call`) runs, streams and comes back fenced as
data. The next hop (inference) is scripted at the bus seam: it takes the work and keeps it."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.tools.settings import ToolSettings
from switchyard.schemas import (
    ChatEvent,
    ChatMessage,
    McpServerEntry,
    McpServerSpec,
    McpStatus,
    McpStatusQuery,
    McpToolRan,
    McpToolRun,
    RouteDecision,
    ToolSpecs,
    ToolSpecsQuery,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.services.tools.service import setup
from switchyard.services.tools.settings import ToolsSettings
from tests.services.gateway.harness import connect
from tests.tools.mcp.servers import demo_http
from tests.wait import wait_for

POOL, REPLICA = "default", "r-test"


@dataclass
class Inference:
    bus: Bus
    works: dict[str, Work] = field(default_factory=dict)

    async def take(self, work: Work) -> None:
        await self.bus.ack(WorkAccepted(rid=work.rid, replica=REPLICA))
        self.works[work.rid] = work


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with demo_http() as served:
        yield served


@pytest.fixture(scope="module")
async def stage(nats_server: NatsServer, server: tuple[str, object]) -> AsyncIterator[tuple[Bus, Inference]]:
    tools_bus = await connect(nats_server, "tools")
    await tools_bus.ensure_log_stream()
    settings = ToolsSettings(
        nats_url=nats_server.url, use_embeddings=False, tools=ToolSettings(docs_use_embeddings=False)
    )
    close = await setup(tools_bus, settings)
    bus = await connect(nats_server, "test")
    inference = Inference(bus)
    await bus.subscribe(subjects.infer(POOL, REPLICA), Work, inference.take)
    kv = await bus.kv(subjects.MCP_BUCKET, McpServerEntry)
    spec = McpServerSpec(name="inventory", transport="http", url=str(server[0]), timeout_s=2)
    await kv.put(spec.key, McpServerEntry(spec=spec, created_ms=1, updated_ms=1))

    async def listed() -> bool:
        got = await bus.request(subjects.TOOLS_MCP_STATUS, McpStatusQuery(), McpStatus, timeout=2)
        return any(s.tools for s in got.servers)

    await wait_for(listed, 30, "the tools stage to list the MCP server's tools")
    yield bus, inference
    await kv.delete(spec.key)
    await bus.drain()
    if close is not None:
        await close()
    await tools_bus.drain()


async def run(bus: Bus, inference: Inference, text: str, **extra: object) -> tuple[Work, list[ChatEvent]]:
    rid = uuid.uuid4().hex
    events: list[ChatEvent] = []

    async def seen(ev: ChatEvent) -> None:
        events.append(ev)

    await bus.subscribe(subjects.chat_events(rid), ChatEvent, seen)
    route = RouteDecision(model="m", mode="fast", pool=POOL, replica=REPLICA, reason="test")
    work = Work(rid=rid, tenant="acme", user="ann", key_id="k", text=text, route=route, input_checked=True, **extra)
    await bus.request(subjects.TOOLS, work, WorkAccepted, timeout=5)
    await wait_for(lambda: rid in inference.works, 30, "the work to reach inference")
    return inference.works[rid], events


async def test_mcp_tools_are_listed_with_the_built_in_ones(stage: tuple[Bus, Inference]) -> None:
    bus, _ = stage
    specs = await bus.request(subjects.TOOLS_SPECS, ToolSpecsQuery(tenant="acme"), ToolSpecs, timeout=3)
    names = [t["name"] for t in specs.tools]
    assert {"orders", "docs", "inventory__lookup_stock"} <= set(names) and "inventory__unsafe.name" not in names


async def test_a_named_mcp_tool_is_planned_called_and_its_result_forwarded(stage: tuple[Bus, Inference]) -> None:
    bus, inference = stage
    work, events = await run(bus, inference, "Use inventory__lookup_stock for 'A-100'.")
    assert work.planned_tools == ["inventory__lookup_stock"]
    [tool] = work.tools
    assert tool.status == "ok" and tool.arguments == {"sku": "A-100"} and "42 units" in tool.output
    assert 'name="inventory__lookup_stock"' in work.tool_prompt and "42 units" in work.tool_prompt
    await wait_for(lambda: [e.tool.status for e in events if e.tool] == ["running", "ok"], 5, "both tool events")


async def test_a_hanging_server_costs_one_timeout_and_the_work_goes_on(stage: tuple[Bus, Inference]) -> None:
    bus, inference = stage
    started = asyncio.get_running_loop().time()
    work, _ = await run(bus, inference, "Use inventory__slow_report for 'Q3', and what is your return policy?")
    by_name = {t.name: t for t in work.tools}
    assert by_name["inventory__slow_report"].status == "timeout" and by_name["docs"].status == "ok"
    assert asyncio.get_running_loop().time() - started < 20


async def test_a_function_tool_naming_an_mcp_tool_is_offered_to_the_model(stage: tuple[Bus, Inference]) -> None:
    bus, inference = stage
    tools = [{"name": "inventory__lookup_stock", "parameters": {}}, {"name": "my_own_tool", "parameters": {}}]
    prompt = [ChatMessage(role="user", content="hello there")]
    work, events = await run(bus, inference, "hello there", client_tools=tools, prompt_messages=prompt)
    assert work.mcp_tools == ["inventory__lookup_stock"] and work.mcp_rounds == 3
    assert not work.tools and not [e for e in events if e.type == "tool"]  # offered, not planned: nothing ran
    off, _ = await run(bus, inference, "hello there", client_tools=tools, prompt_messages=prompt, tool_choice="none")
    assert off.mcp_tools == [] and off.mcp_rounds == 0


async def test_a_call_the_model_wrote_runs_streams_and_comes_back_as_data(stage: tuple[Bus, Inference]) -> None:
    bus, _ = stage
    rid = uuid.uuid4().hex
    events: list[ChatEvent] = []

    async def seen(ev: ChatEvent) -> None:
        events.append(ev)

    await bus.subscribe(subjects.chat_events(rid), ChatEvent, seen)
    call = McpToolRun(
        rid=rid, tenant="acme", user="ann", id="call_1", name="inventory__lookup_stock", arguments={"sku": "A-100"}
    )
    ran = await bus.request(subjects.TOOLS_MCP_CALL, call, McpToolRan, timeout=10)
    assert ran.event.status == "ok" and "42 units" in ran.event.output
    assert ran.call.server == "inventory" and ran.call.status == "ok" and ran.call.result_bytes > 0
    assert "<tool_results>" in ran.prompt and "42 units" in ran.prompt
    await wait_for(lambda: [e.tool.status for e in events if e.tool] == ["running", "ok"], 5, "both tool events")

    hung = call.model_copy(update={"id": "call_2", "name": "inventory__slow_report", "arguments": {"topic": "Q3"}})
    ran = await bus.request(subjects.TOOLS_MCP_CALL, hung, McpToolRan, timeout=10)
    assert ran.event.status == "timeout" and ran.call.status == "timeout" and "did not answer" in ran.prompt
    unknown = call.model_copy(update={"id": "call_3", "name": "nowhere__thing"})
    ran = await bus.request(subjects.TOOLS_MCP_CALL, unknown, McpToolRan, timeout=10)
    assert ran.event.status == "error" and "no MCP tool" in ran.event.output
