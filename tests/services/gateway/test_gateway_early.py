"""The gateway's early copy of a request (`subjects.EARLY`): published once the request is admitted, before
it goes to context, so the tools stage's planner pass is under way while context still holds the request;
a request refused at the edge (no key, an invalid body, an unknown model, a limit) publishes none."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.libs.embeddings.batcher import PassBatcher
from switchyard.libs.tools import ToolContext, ToolPlanner
from switchyard.libs.tools.settings import ToolSettings
from switchyard.schemas import Work, subjects
from switchyard.services.gateway.settings import TierLimits
from switchyard.services.tools.service import ToolsStage
from tests.services.gateway.harness import Gateway, Responder, connect, gateway
from tests.wait import wait_for

MODEL = "SmolLM2-135M-Instruct"


def chat(text: str) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


@dataclass
class Planning:
    """The tools stage's early start, with a planner pass that tells the loop which clauses it began on."""

    loop: asyncio.AbstractEventLoop
    embedded: list[list[str]] = field(default_factory=list)
    began: dict[str, asyncio.Event] = field(default_factory=dict)
    stage: ToolsStage = field(init=False)

    def __post_init__(self) -> None:
        def embed(clauses: list[str]) -> list[np.ndarray]:  # on the batcher's thread
            self.embedded.append(clauses)
            for clause in clauses:
                self.loop.call_soon_threadsafe(self.event(clause).set)
            return [np.zeros(4, dtype=np.float32) for _ in clauses]

        none: Any = None
        planning = PassBatcher(embed, name="planner-test")
        self.stage = ToolsStage(none, ToolPlanner(ToolSettings()), none, none, none, planning)

    def event(self, clause: str) -> asyncio.Event:
        return self.began.setdefault(clause, asyncio.Event())

    def clauses(self, work: Work) -> list[str]:
        ctx = ToolContext(tenant=work.tenant, user=work.user, rid=work.rid)
        return self.stage.planner.draft(work.text, ctx).unmatched


@dataclass
class HeldContext(Responder):
    """Context that forwards a request only once the planner's pass on it has begun, and notes whether the
    tools stage would take that pass (same rid, same clauses)."""

    planning: Planning | None = None
    took_early: dict[str, bool] = field(default_factory=dict)

    async def on_work(self, work: Work) -> None:
        assert self.planning is not None
        clauses = self.planning.clauses(work)
        if clauses:
            try:
                await asyncio.wait_for(self.planning.event(clauses[0]).wait(), 10)
            except TimeoutError:
                self.took_early[work.rid] = False
            else:
                taken = self.planning.stage.early.taken
                await self.planning.stage._embed_for(work.rid)(clauses)  # as the tools stage asks for it
                self.took_early[work.rid] = self.planning.stage.early.taken == taken + 1
        await super().on_work(work)


@pytest.fixture(scope="module")
async def held(nats_server: NatsServer) -> AsyncIterator[tuple[HeldContext, Planning]]:
    context_bus, tools_bus = await connect(nats_server, "context"), await connect(nats_server, "tools")
    planning = Planning(asyncio.get_running_loop())
    ctx = HeldContext(bus=context_bus, healthy=set(subjects.STAGES), planning=planning)
    await ctx.start()
    await tools_bus.subscribe(subjects.EARLY, Work, planning.stage.start_early, queue="tools", span=False)
    await tools_bus.flush()
    yield ctx, planning
    await planning.stage.planning.close()
    await tools_bus.drain()
    await context_bus.drain()


@pytest.fixture(scope="module")
async def gw(nats_server: NatsServer, held: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    tiers = {
        "free": TierLimits(requests_per_minute=1, tokens_per_minute=1_000_000, concurrent_streams=5),
        "pro": TierLimits(requests_per_minute=1000, tokens_per_minute=1_000_000, concurrent_streams=5),
    }
    async with gateway(nats_server, tmp_path_factory.mktemp("gw"), request_timeout_s=20.0, tiers=tiers) as g:
        _, g.pro_key = await g.keys.create("acme", "pro", user="ann")
        _, g.free_key = await g.keys.create("tiny", "free", user="bob")  # its own tenant: limits are per tenant
        yield g


async def test_the_planner_pass_begins_before_context_forwards(gw: Gateway, held: tuple[HeldContext, Planning]) -> None:
    ctx, planning = held
    text = "Explain how a bicycle works."
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        r = await c.post("/v1/chat/completions", json=chat(text), headers=gw.auth())
    assert r.status_code == 200, r.text
    (work,) = [w for w in ctx.works if w.text == text]
    assert ctx.took_early[work.rid], "context forwarded before the planner's pass on the early copy began"
    assert planning.embedded.count(planning.clauses(work)) == 1  # one pass: the stage took the early one


async def test_no_early_copy_for_a_request_refused_at_the_edge(nats_server: NatsServer, gw: Gateway, held: Any) -> None:
    bus = await connect(nats_server, "listener")
    copies: list[Work] = []

    async def heard(work: Work) -> None:
        copies.append(work)

    await bus.subscribe(subjects.EARLY, Work, heard, span=False)
    await bus.flush()
    mark = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        r = await c.post("/v1/chat/completions", json=chat(f"no key {mark}"))
        assert r.status_code == 401
        r = await c.post("/v1/chat/completions", json=chat(f"bad key {mark}"), headers=gw.auth("sk-not-a-key"))
        assert r.status_code == 401
        r = await c.post("/v1/chat/completions", json=chat("   "), headers=gw.auth())
        assert r.status_code == 400
        body = {**chat(f"unknown model {mark}"), "model": "no-such-model"}
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth())
        assert r.status_code == 404
        body = {**chat(f"bad sampling {mark}"), "temperature": -1}
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth())
        assert r.status_code == 400
        r = await c.post("/v1/chat/completions", json=chat(f"free, first {mark}"), headers=gw.auth(gw.free_key))
        assert r.status_code == 200, r.text
        r = await c.post("/v1/chat/completions", json=chat(f"free, limited {mark}"), headers=gw.auth(gw.free_key))
        assert r.status_code == 429
        r = await c.post("/v1/chat/completions", json=chat(f"admitted {mark}"), headers=gw.auth())
        assert r.status_code == 200, r.text
    # One publisher, in order: once the last admitted request's copy is here, every earlier one would be too.
    await wait_for(lambda: any(w.text == f"admitted {mark}" for w in copies), what="the admitted request's copy")
    assert [w.text for w in copies] == [f"free, first {mark}", f"admitted {mark}"]
    await bus.drain()
