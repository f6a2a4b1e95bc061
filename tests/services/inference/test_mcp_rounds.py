"""The model's own calls to MCP tools, on a real nats-server with the bundled model's tokenizer and chat
template: an answer that calls an offered MCP tool is held back, the call goes to the tools stage over
`tools.mcp.call`, the next turn's prompt holds the call and its fenced result, and the model writes again
within the round limit. The model (the engine phase) and the tools stage are scripted at their seams: the
phase answers the scripted texts, the tools responder answers each call."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.engine import SamplingParams
from switchyard.libs.tokenizer import Tokenizer, load_tokenizer
from switchyard.schemas import (
    ChatEvent,
    ChatMessage,
    McpCall,
    McpToolRan,
    McpToolRun,
    RequestPlan,
    ToolEvent,
    Work,
    subjects,
)
from switchyard.services.inference.mcp_rounds import McpRounds, Splitter, answer_with_mcp
from switchyard.services.inference.settings import InferenceSettings
from tests.services.gateway.harness import connect
from tests.wait import wait_for

TOOL = "inventory__lookup_stock"
SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}


def call(sku: str) -> str:
    return f'<tool_call>{{"name": "{TOOL}", "arguments": {{"sku": "{sku}"}}}}</tool_call>'


@dataclass
class Model:
    """The engine phase, scripted: each round answers the next text, through the splitter as `_phase` does."""

    answers: list[str]
    finish: str = "stop"
    prompts: list[str] = field(default_factory=list)
    params: list[SamplingParams] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    tokens: int = 0

    async def __call__(
        self, request_id: str, prompt: str, params: SamplingParams, first: bool, split: Splitter | None
    ) -> str:
        self.prompts.append(prompt)
        self.params.append(params)
        text = self.answers[len(self.prompts) - 1]
        self.tokens += 10
        if split is None:
            self.shown.append(text)
        else:
            half = len(text) // 2
            for piece, last in ((text[:half], False), (text[half:], True)):
                parts, _ = split(piece, 1, last)
                self.shown += [t for _, t in parts]
        return self.finish


@dataclass
class Tools:
    """The tools stage's side of `tools.mcp.call`: each call answered with its SKU's stock."""

    runs: list[McpToolRun] = field(default_factory=list)

    async def run(self, req: McpToolRun) -> McpToolRan:
        self.runs.append(req)
        out = f"SKU {req.arguments.get('sku')}: 42 units"
        event = ToolEvent(id=req.id, name=req.name, arguments=req.arguments, status="ok", output=out)
        record = McpCall(id=req.id, name=req.name, server="inventory", transport="http", status="ok")
        fenced = f'<tool_results>\n<tool_result name="{req.name}">\n{out}\n</tool_result>\n</tool_results>'
        return McpToolRan(round=req.round, event=event, call=record, prompt=fenced)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    s = InferenceSettings()
    return load_tokenizer(s.engine_env.resolved_model_path(s.model_path))


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await connect(nats_server, "inference")
    yield b
    await b.drain()


@pytest.fixture
async def tools(nats_server: NatsServer) -> AsyncIterator[Tools]:
    """A tools stage answering `tools.mcp.call`, gone after the test even when it fails (a stage left behind
    would answer the next module's calls on the shared server)."""
    b = await connect(nats_server, "tools")
    t = Tools()
    await b.subscribe(subjects.TOOLS_MCP_CALL, McpToolRun, t.run, queue="tools")
    await b.flush()  # the server knows the subscription before inference's first call
    yield t
    await b.drain()


def work(**extra: Any) -> Work:
    fields: dict[str, Any] = {
        "rid": uuid.uuid4().hex,
        "tenant": "acme",
        "user": "ann",
        "key_id": "k",
        "text": "How many units of A-100?",
        "prompt": "<the prompt>",
        "prompt_messages": [ChatMessage(role="user", content="How many units of A-100?")],
        "client_tools": [{"name": TOOL, "description": "stock", "parameters": SCHEMA}],
        "tool_choice": f"function:{TOOL}",
        "mcp_tools": [TOOL],
        "mcp_rounds": 3,
        **extra,
    }
    return Work(**fields)


async def answer(
    bus: Bus, tokenizer: Tokenizer, w: Work, model: Model, timeout_s: float = 5.0
) -> tuple[str, McpRounds]:
    plan = RequestPlan(model="m", mode="fast", mode_reason="test", prompt_budget=4096, max_tokens=200)
    out = McpRounds()
    with trace.get_tracer("test").start_as_current_span("chat") as span:
        finish = await answer_with_mcp(
            model,
            bus,
            tokenizer,
            8192,
            w,
            plan,
            used=lambda: model.tokens,
            cancelled=lambda: False,
            request_ids=(w.rid, w.rid + "-answer"),
            span=span,
            call_timeout_s=timeout_s,
            out=out,
        )
    return finish, out


async def test_a_forced_call_runs_and_the_model_answers_from_its_result(
    nats_server: NatsServer, bus: Bus, tokenizer: Tokenizer, tools: Tools
) -> None:
    # The forced call's opening is the prefill: the model writes the rest of it.
    model = Model(['A-100"}}</tool_call>', "There are 42 units."])
    finish, out = await answer(bus, tokenizer, work(), model)
    assert finish == "stop" and model.shown == ["There are 42 units."]
    assert [(r.name, r.arguments, r.round, r.tenant) for r in tools.runs] == [(TOOL, {"sku": "A-100"}, 0, "acme")]
    assert model.prompts[0].startswith("<the prompt><tool_call>") and model.params[0].constraint is not None
    # The second turn: the call as the model wrote it, then its result as data, then the assistant's turn.
    second = model.prompts[1]
    assert second.index(call("A-100")) < second.index("SKU A-100: 42 units") and second == out.prompt
    # The call was forced once: now the model chooses (a grammar that admits prose).
    assert model.params[1].constraint is not None and '"mode": "auto"' in model.params[1].constraint.spec
    assert [r.call.server for r in out.ran] == ["inventory"]


async def test_rounds_are_bounded_and_a_repeated_call_is_not_run_again(
    nats_server: NatsServer, bus: Bus, tokenizer: Tokenizer, tools: Tools
) -> None:
    model = Model(['A-1"}}</tool_call>', call("A-1"), "Done."])
    finish, out = await answer(bus, tokenizer, work(), model)
    assert finish == "stop" and len(tools.runs) == 1 and model.shown == ["Done."]
    # The last turn is made without tools, and a call it begins ends it.
    assert model.params[2].constraint is None and "<tool_call>" in model.params[2].stop

    model = Model(['A-1"}}</tool_call>', call("A-2"), "Done."])
    finish, out = await answer(bus, tokenizer, work(mcp_rounds=2), model)
    assert [r.arguments["sku"] for r in tools.runs[1:]] == ["A-1", "A-2"] and [r.round for r in out.ran] == [0, 1]
    assert len(model.prompts) == 3 and model.params[2].constraint is None and model.shown == ["Done."]


async def test_prose_is_released_and_a_cut_call_is_not_run(
    nats_server: NatsServer, bus: Bus, tokenizer: Tokenizer, tools: Tools
) -> None:
    model = Model(["Just prose."])
    finish, out = await answer(bus, tokenizer, work(tool_choice="auto"), model)
    assert finish == "stop" and model.shown == ["Just prose."] and not out.ran and not out.prompt
    cut = Model(['A-1", "more'], finish="length")
    finish, out = await answer(bus, tokenizer, work(), cut)
    assert finish == "length" and not tools.runs and not out.ran


async def test_a_tools_stage_that_does_not_answer_costs_one_error_and_the_model_goes_on(
    nats_server: NatsServer, bus: Bus, tokenizer: Tokenizer
) -> None:
    w = work()
    events: list[ChatEvent] = []

    async def seen(ev: ChatEvent) -> None:
        events.append(ev)

    await bus.subscribe(subjects.chat_events(w.rid), ChatEvent, seen)
    model = Model(['A-1"}}</tool_call>', "Sorry."])
    finish, out = await answer(bus, tokenizer, w, model, timeout_s=0.5)
    assert finish == "stop" and model.shown == ["Sorry."]
    [ran] = out.ran
    assert ran.event.status == "error" and ran.call.status == "error" and "failed" in model.prompts[1]
    await wait_for(lambda: [e.tool.status for e in events if e.tool] == ["error"], 5, "the tool error event")
