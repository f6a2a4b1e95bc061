"""Plan tool calls from the user's message, run them in parallel, show them, add results to the prompt."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.early import EarlyPasses
from switchyard.libs.embeddings import get_embedder
from switchyard.libs.embeddings.batcher import PassBatcher
from switchyard.libs.plan import template_inputs
from switchyard.libs.safety import InputGuard
from switchyard.libs.tokenizer import Tokenizer, load_tokenizer
from switchyard.libs.tokenizer.template import render_continuing, render_prompt
from switchyard.libs.tools import ToolCall, ToolContext, ToolPlanner, ToolResult, ToolRunner, results_to_prompt
from switchyard.libs.tools.mcp import McpHub
from switchyard.schemas import (
    ChatEvent,
    ChatMessage,
    EmbedRequest,
    ErrorCode,
    Forward,
    InputDecision,
    McpCall,
    McpServerEntry,
    McpStatus,
    McpStatusQuery,
    McpToolRan,
    McpToolRun,
    SafetyVerdict,
    ToolEvent,
    ToolsPart,
    ToolSpecs,
    ToolSpecsQuery,
    Work,
    subjects,
)
from switchyard.services.tools.embeddings import Embeddings
from switchyard.services.tools.settings import ToolsSettings

# The classifier is batched; under load a verdict can queue behind a pass or two.
INPUT_CHECK_TIMEOUT_S = 10.0


def to_event(r: ToolResult) -> ToolEvent:
    return ToolEvent(
        id=r.call_id,
        name=r.name,
        arguments=r.arguments,
        status=r.status,  # type: ignore[arg-type]
        duration_ms=round(r.duration_ms, 1),
        output=r.output[:2000],
        sources=r.sources,
    )


def with_tool_results(messages: list[ChatMessage], data: str, prefill: bool = False) -> list[ChatMessage]:
    """Tool results go after the history and before the new message (and the answer's start it may end
    with: `prefill`), so the history prefix (and the KV blocks cached for it) stays byte-identical from turn
    to turn."""
    at = len(messages) - (2 if prefill else 1)
    return [*messages[:at], ChatMessage(role="system", content=data), *messages[at:]]


class ToolsStage:
    def __init__(
        self,
        bus: Bus,
        planner: ToolPlanner,
        runner: ToolRunner,
        tokenizer: Tokenizer,
        guard: InputGuard,
        planning: PassBatcher[str, np.ndarray],
        mcp: McpHub | None = None,
    ):
        self.bus = bus
        self.mcp = mcp
        # Planning embeds the message: on its own niced thread, so concurrent requests queue for one
        # core's spare time instead of each taking a thread of the engine's, and every request
        # waiting goes into the same pass.
        self.planning = planning
        self.guard = guard
        self.planner = planner
        self.runner = runner
        self.tokenizer = tokenizer
        # Planning passes started from context's early copy of the request (`subjects.EARLY`).
        self.early: EarlyPasses[list[np.ndarray]] = EarlyPasses()

    async def start_early(self, work: Work) -> None:
        """The planner's embedding of the clauses no rule matches, started while context and the router work."""
        if work.prompt_mode == "raw" or work.replay_mode == "inference" or not self.planner.use_embeddings:
            return
        draft = self.planner.draft(work.text, ToolContext(tenant=work.tenant, user=work.user, rid=work.rid))
        if draft.unmatched:
            clauses = draft.unmatched
            self.early.start(work.rid, tuple(clauses), lambda: self.planning.run_many(clauses))

    def _embed_for(self, rid: str) -> Callable[[list[str]], Awaitable[list[np.ndarray]]]:
        async def embed(clauses: list[str]) -> list[np.ndarray]:
            early = self.early.take(rid, tuple(clauses))
            return await early if early is not None else await self.planning.run_many(clauses)

        return embed

    async def _output_verdicts(self, result: ToolResult) -> list[SafetyVerdict]:
        """What the guard finds in a tool's output (indirect injection): verdicts that flag, never block."""
        return [
            SafetyVerdict(
                category=v.category,
                score=v.score,
                action=v.action,  # type: ignore[arg-type]
                classifier=v.classifier,
                version=v.version,
                detail=f"{result.name}: {v.detail}",
                source="tool",
            )
            for v in await asyncio.to_thread(self.guard.check, result.output, source="tool")
            if v.action != "allow"
        ]

    async def handle(self, work: Work) -> Forward:
        if work.route is None:
            raise BusError(ErrorCode.internal, "tools stage got work without a route")
        nxt = subjects.infer(work.route.pool, work.route.replica)
        anyone = subjects.infer_any(work.route.pool)  # if the chosen replica died since the router chose it
        if work.replay_mode == "inference":
            # The logged prompt already holds the original tool results: replay it as it was.
            return Forward(
                subject=nxt,
                work=work,
                ack=True,
                fallback=anyone,
                decision={"planned": [], "replay": "prompt as logged"},
            )
        if work.prompt_mode == "raw":
            # A text completion's prompt is passed verbatim: no tool runs, and nothing is added to it.
            return Forward(subject=nxt, work=work, ack=True, fallback=anyone, decision={"planned": [], "raw": True})
        ctx = ToolContext(tenant=work.tenant, user=work.user, rid=work.rid)
        # The planner reads only the user's own message: text inside documents or earlier tool
        # results can never make it call a tool.
        calls = await self.planner.plan_batched(work.text, ctx, self._embed_for(work.rid))
        if self.mcp is not None:
            # The same rule: the registered servers' tools are planned from the user's message only.
            room = self.runner.settings.max_calls - len(calls)
            calls += await self.mcp.plan(work.text, work.tenant, room)
            self.offer_mcp(work)
        if not calls and not work.mcp_tools:
            return Forward(subject=nxt, work=work, ack=True, fallback=anyone, decision={"planned": []})
        work.planned_tools = [c.name for c in calls]
        if not work.input_checked:
            # No tool runs (and no tool is shown) for a message input safety blocks: a block raises here.
            verdict = await self.bus.request(subjects.SAFETY_IN, work, InputDecision, timeout=INPUT_CHECK_TIMEOUT_S)
            work.verdicts += verdict.verdicts
            work.input_checked = True
        if not calls:
            offered = {"planned": [], "mcp_offered": work.mcp_tools}
            return Forward(subject=nxt, work=work, ack=True, fallback=anyone, decision=offered)
        for c in calls:
            await self.bus.emit(
                ChatEvent(
                    rid=work.rid,
                    type="tool",
                    tool=ToolEvent(id=c.id, name=c.name, arguments=c.arguments, status="running"),
                )
            )
        results, mcp_calls = await self.run(calls, ctx)
        work.tools = [to_event(r) for r in results]
        # Indirect injection: tool output that tries to instruct the model is flagged (never blocked) and
        # goes into the prompt marked as data either way.
        for r in results:
            work.verdicts += await self._output_verdicts(r)
        for ev in work.tools:
            await self.bus.emit(ChatEvent(rid=work.rid, type="tool", tool=ev))
        work.tool_prompt = results_to_prompt(results)
        if work.prompt_messages:
            work.prompt_messages = with_tool_results(work.prompt_messages, work.tool_prompt, work.prefill is not None)
            msgs = [m.model_dump() for m in work.prompt_messages]
            # As context rendered them: a template that lays tools out itself gets them again (for
            # any other, our tool section is already in the system message).
            tools = work.client_tools if work.tool_choice != "none" and self.tokenizer.template.renders_tools else None
            # With the plan's template switch (and empty thinking block) as context rendered it too.
            kwargs, after = template_inputs(work.plan, self.tokenizer.template)
            if work.prefill is not None:  # the prompt ends inside the answer's start, as context rendered it
                work.prompt = render_continuing(self.tokenizer.template, msgs, tools, kwargs)
            else:
                work.prompt = render_prompt(self.tokenizer.template, msgs, tools, work.add_generation_prompt, kwargs)
                work.prompt += after if work.add_generation_prompt else ""
            work.prompt_tokens = self.tokenizer.count(work.prompt)
        part = ToolsPart(
            tools=work.tools,
            prompt=work.prompt,
            tool_verdicts=[v for v in work.verdicts if v.source == "tool"],
        )
        if mcp_calls:
            part.mcp = mcp_calls
        decision: dict[str, object] = {"planned": [c.name for c in calls]}
        if work.mcp_tools:
            decision["mcp_offered"] = work.mcp_tools
        return Forward(subject=nxt, work=work, ack=True, fallback=anyone, decision=decision, part=part)

    def offer_mcp(self, work: Work) -> None:
        """The client's function tools that are this tenant's MCP tools: the pipeline runs the model's calls
        to them (inference hands each to `run_for_model`). Only where the prompt can be rendered again with
        a result in it (a chat, not a raw completion), and never with tools switched off."""
        if self.mcp is None or not work.client_tools or work.tool_choice == "none" or not work.prompt_messages:
            return
        names = [str(t.get("name", "")) for t in work.client_tools]
        work.mcp_tools = [n for n in names if self.mcp.owns(n, work.tenant)]
        work.mcp_rounds = self.runner.settings.mcp_max_rounds if work.mcp_tools else 0

    async def run_for_model(self, req: McpToolRun) -> McpToolRan:
        """One call the model wrote to an MCP tool: bounded as a planned call, shown as a `tool` event, its
        output checked for injection, and its result fenced as data for the model's next turn."""
        if self.mcp is None:
            raise BusError(ErrorCode.unavailable, "this tools replica has no MCP servers")
        call = ToolCall(id=req.id, name=req.name, arguments=req.arguments)
        ctx = ToolContext(tenant=req.tenant, user=req.user, rid=req.rid)
        running = ToolEvent(id=call.id, name=call.name, arguments=call.arguments, status="running")
        await self.bus.emit(ChatEvent(rid=req.rid, type="tool", tool=running))
        result, record = await self.mcp.run_one(call, ctx)
        verdicts = await self._output_verdicts(result)
        event = to_event(result)
        await self.bus.emit(ChatEvent(rid=req.rid, type="tool", tool=event))
        prompt = results_to_prompt([result])
        return McpToolRan(round=req.round, event=event, call=record, prompt=prompt, verdicts=verdicts)

    async def run(self, calls: list[ToolCall], ctx: ToolContext) -> tuple[list[ToolResult], list[McpCall]]:
        """Built-in and MCP calls side by side, results in the plan's order."""
        mcp = self.mcp
        if mcp is None:
            return await self.runner.run(calls, ctx), []
        theirs = [c for c in calls if mcp.owns(c.name, ctx.tenant)]
        ours = [c for c in calls if c not in theirs]
        built_in, remote = await asyncio.gather(self.runner.run(ours, ctx), mcp.run(theirs, ctx))
        by_id = {r.call_id: r for r in built_in} | {r.call_id: r for r, _ in remote}
        return [by_id[c.id] for c in calls if c.id in by_id], [rec for _, rec in remote]


async def follow_mcp(bus: Bus, hub: McpHub) -> None:
    """Keep `hub` equal to the registrations in the bus's key-value store, and answer what it found."""
    kv = await bus.kv(subjects.MCP_BUCKET, McpServerEntry)
    await kv.watch(hub.changed)

    async def status(_: McpStatusQuery) -> McpStatus:
        return hub.status()

    await bus.subscribe(subjects.TOOLS_MCP_STATUS, McpStatusQuery, status, queue="tools", span=False)


async def setup(bus: Bus, settings: ToolsSettings) -> Callable[[], Awaitable[None]] | None:
    tokenizer = await asyncio.to_thread(load_tokenizer, settings.model_path)
    planner = await asyncio.to_thread(ToolPlanner, settings.tools, use_embeddings=settings.use_embeddings)
    # Load the embedding model, index the policies and probe the sandbox before taking work, so the
    # first user neither waits for them nor gets keyword-only search.
    await asyncio.to_thread(planner.warmup)
    runner = ToolRunner(settings.tools)
    await runner.warmup()
    guard = InputGuard(use_embeddings=False)
    planning = PassBatcher(planner.embed_clauses, name="planner", nice=settings.planner_nice, threads=1)
    # MCP tools' descriptions and the message's clauses share the planner's pass, where the encoder loaded.
    embed = planning.run_many if settings.use_embeddings and planner.use_embeddings else None
    mcp = McpHub(settings.tools, runner.code.sandbox, embed, bus.tracer, replica=bus.replica)
    await follow_mcp(bus, mcp)
    refresh = asyncio.create_task(mcp.keep_fresh())
    stage = ToolsStage(bus, planner, runner, tokenizer, guard, planning, mcp)
    await bus.stage(subjects.TOOLS, stage.handle)
    await bus.subscribe(subjects.EARLY, Work, stage.start_early, queue="tools", span=False)
    await bus.subscribe(subjects.TOOLS_MCP_CALL, McpToolRun, stage.run_for_model, queue="tools")

    async def specs(q: ToolSpecsQuery) -> ToolSpecs:
        return ToolSpecs(tools=runner.specs() + mcp.specs(q.tenant))

    await bus.subscribe(subjects.TOOLS_SPECS, ToolSpecsQuery, specs, queue="tools", span=False)
    if settings.use_embeddings and planner.use_embeddings:  # the encoder loaded (warmup above)
        # get_embedder() is the one instance the planner loaded: no second copy of the model.
        served = Embeddings(get_embedder(), planning.run_many)
        await bus.subscribe(subjects.EMBEDDINGS, EmbedRequest, served.handle, queue="tools")

    async def close() -> None:
        refresh.cancel()
        await mcp.close()
        await planning.close()
        await runner.aclose()

    return close
