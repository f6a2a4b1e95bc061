"""The model's own calls to MCP tools: a round's answer that calls an MCP tool the request offered is held
back, each call goes to the tools stage (`tools.mcp.call`, which owns the MCP servers, bounds the call and
streams its `tool` events), the results go back to the model as a fenced turn of data, and it writes again;
after `work.mcp_rounds` such rounds it answers without tools. Only the final answer is streamed as text."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from switchyard.libs.bus import Bus
from switchyard.libs.constraints.calls import CLOSE, OPEN, parse_calls
from switchyard.libs.engine import SamplingParams
from switchyard.libs.plan import template_inputs
from switchyard.libs.tokenizer import Tokenizer
from switchyard.libs.tokenizer.template import render_prompt
from switchyard.libs.tools.prompt import results_to_prompt
from switchyard.libs.tools.types import ToolResult
from switchyard.schemas import (
    ChatEvent,
    McpCall,
    McpToolRan,
    McpToolRun,
    RequestPlan,
    ToolEvent,
    Work,
    subjects,
)
from switchyard.services.inference.phases import TOOL_CALL_CLOSE, answer_constraint, params_of, tool_prefill

# Calls past these in one answer are left out (the model is told nothing of them).
MAX_CALLS_PER_ROUND = 4
Splitter = Callable[[str, int, bool], tuple[list[tuple[str, str]], bool]]


# An engine request streamed as answer text: (request id, prompt, params, first phase, splitter) to its finish.
Phase = Callable[[str, str, SamplingParams, bool, Splitter | None], Awaitable[str]]


@dataclass
class McpRounds:
    """What the rounds made: each call with its result, and the last round's prompt."""

    ran: list[McpToolRan] = field(default_factory=list)
    prompt: str = ""


def written(calls: list[dict[str, Any]]) -> str:
    """The calls as the model wrote them, for the assistant turn its next prompt shows."""
    return "".join(
        OPEN + json.dumps({"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}) + CLOSE
        for c in calls
    )


async def run_call(bus: Bus, work: Work, call: dict[str, Any], round_: int, timeout_s: float) -> McpToolRan:
    """One call, run by the tools stage; a tools stage that does not answer costs this call an error result."""
    name = call["function"]["name"]
    args = json.loads(call["function"]["arguments"])
    req = McpToolRun(
        rid=work.rid, tenant=work.tenant, user=work.user, id=call["id"], name=name, arguments=args, round=round_
    )
    try:
        return await bus.request(subjects.TOOLS_MCP_CALL, req, McpToolRan, timeout=timeout_s)
    except Exception as e:
        why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        text = f"{name} failed: {why}"
        event = ToolEvent(id=req.id, name=name, arguments=args, status="error", output=text)
        await bus.emit(ChatEvent(rid=work.rid, type="tool", tool=event))
        result = ToolResult(call_id=req.id, name=name, arguments=args, status="error", output=text)
        server = name.split("__", 1)[0]
        record = McpCall(id=req.id, name=name, server=server, transport="http", status="error", error=why)
        return McpToolRan(round=round_, event=event, call=record, prompt=results_to_prompt([result]))


async def answer_with_mcp(
    phase: Phase,
    bus: Bus,
    tokenizer: Tokenizer,
    max_model_len: int,
    work: Work,
    plan: RequestPlan,
    used: Callable[[], int],
    cancelled: Callable[[], bool],
    request_ids: tuple[str, str],
    span: Span,
    call_timeout_s: float,
    out: McpRounds,
) -> str:
    """The answer of a request that offers MCP tools; returns the finish reason. `used()` is the completion
    tokens spent so far; `request_ids` the engine ids of the first and of every later round."""
    names = set(work.mcp_tools)
    template = tokenizer.template
    kwargs, after = template_inputs(work.plan, template)
    tools = work.client_tools if template.renders_tools else None
    messages: list[dict[str, Any]] = [m.model_dump() for m in work.prompt_messages]
    prompt, choice = work.prompt, work.tool_choice
    stops = [TOOL_CALL_CLOSE] if work.client_tools and not work.parallel_tool_calls else []
    seen: set[str] = set()
    round_, repeated = 0, False
    while True:
        if cancelled():
            return "cancelled"
        left = plan.max_tokens - used()
        if left <= 0:
            return "length"
        final = round_ >= work.mcp_rounds or repeated
        asked = work.model_copy(update={"tool_choice": "none" if final else choice})
        prefill = tool_prefill(asked.client_tools, asked.tool_choice)
        held = [prefill]

        def hold(text: str, tokens: int, last: bool, held: list[str] = held) -> tuple[list[tuple[str, str]], bool]:
            # A call is known only once the answer is complete (the gateway holds such answers too).
            held.append(text)
            answer = "".join(held)
            if not last or parse_calls(answer, names):
                return [], False
            return ([("delta", answer)] if answer else []), False

        # The last answer is made without tools: a call it begins ends it.
        extra = [*stops, OPEN] if final else stops
        params = params_of(work.sampling, left, extra_stop=extra, constraint=answer_constraint(asked, prefill))
        request_id = request_ids[0] if round_ == 0 else request_ids[1]
        finish = await phase(request_id, prompt + prefill, params, round_ == 0, None if final else hold)
        calls = [] if final else parse_calls("".join(held), names, MAX_CALLS_PER_ROUND)
        if not calls or finish != "stop":
            # A call that max_tokens cut (or a cancelled one) is not run: no tokens are left to use its result.
            return finish
        calls = fresh(calls, seen)
        round_ += 1
        if not calls:
            # Only calls it made already: it has their results, so it answers now (a small model loops).
            repeated = True
            continue
        span.add_event("mcp_round", {"round": round_ - 1, "calls": [c["function"]["name"] for c in calls]})
        ran = await asyncio.gather(*(run_call(bus, work, c, round_ - 1, call_timeout_s) for c in calls))
        out.ran += ran
        messages += [
            {"role": "assistant", "content": written(calls)},
            {"role": "user", "content": "\n".join(r.prompt for r in ran)},
        ]
        prompt = render_prompt(template, messages, tools, True, kwargs) + after
        out.prompt = prompt
        if tokenizer.count(prompt) >= max_model_len:
            return "length"
        # A forced call is forced once; after it the model chooses.
        choice = "auto"


def fresh(calls: list[dict[str, Any]], seen: set[str]) -> list[dict[str, Any]]:
    """The calls not made before in this request (same tool, same arguments), each once; `seen` grows."""
    out = []
    for c in calls:
        key = c["function"]["name"] + json.dumps(json.loads(c["function"]["arguments"]), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
