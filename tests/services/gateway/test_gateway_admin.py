"""Admin routes, feedback and replay against a real logger (in this process) and a scripted pipeline."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import (
    ChatEvent,
    ConversationQuery,
    ConversationReply,
    StagePart,
    StageRecord,
    Turn,
    Usage,
    Work,
    WorkAccepted,
    subjects,
)
from switchyard.services.logger.service import setup as logger_setup
from switchyard.services.logger.settings import LoggerSettings
from tests.services.gateway.harness import Gateway, connect, gateway
from tests.wait import wait_for


@dataclass
class Pipeline:
    """Stands in for router..safety_out: answers replays, and logs what inference and safety_out would."""

    bus: Bus
    works: list[Work] = field(default_factory=list)

    async def on_work(self, work: Work) -> None:
        await self.bus.ack(WorkAccepted(rid=work.rid, replica="pipeline"))  # as a stage acks the hand-over
        self.works.append(work)
        # Seed 7 reproduces the logged answer; any other seed changes its last word.
        text = "Hello big world" if work.sampling.seed == 7 else "Hello big moon"
        await self.bus.emit(ChatEvent(rid=work.rid, type="delta", text=text))
        usage = Usage(prompt_tokens=5, completion_tokens=3)
        await log(self.bus, work.rid, work.tenant, "inference", raw_output=text, usage=usage.model_dump())
        await log(self.bus, work.rid, work.tenant, "safety_out", status="complete", output=text, released=text)
        await self.bus.emit(ChatEvent(rid=work.rid, type="done", finish_reason="stop", usage=usage))

    async def on_conversation(self, q: ConversationQuery) -> ConversationReply:
        turns = [
            Turn(id="1", rid="before", user_text="first", answer="one", status="complete"),
            Turn(id="2", rid="orig-chat", user_text="second", answer="two", status="complete"),
            Turn(id="3", rid="after", user_text="third", answer="three", status="complete"),
        ]
        return ConversationReply(chat_id=q.chat_id, turns=turns)


async def log(bus: Bus, rid: str, tenant: str, stage: str, **record: Any) -> None:
    part = TypeAdapter(StagePart).validate_python({"kind": stage, **record})
    await bus.log_stage(
        StageRecord(rid=rid, stage=stage, tenant=tenant, started_ms=now_ms(), duration_ms=3.0, part=part)
    )


async def log_request(bus: Bus, rid: str, tenant: str = "acme", chat_id: str | None = None, **extra: Any) -> None:
    request = {"text": "hi there", "chat_id": chat_id, "user": "ann", "sampling": {"seed": 7, "max_tokens": 16}}
    await log(bus, rid, tenant, "gateway", api="chat", request=request)
    await log(bus, rid, tenant, "context", prompt="<prompt>hi there</prompt>", chat_id=chat_id)
    await log(
        bus,
        rid,
        tenant,
        "router",
        route={"model": "SmolLM2-135M-Instruct", "mode": "fast", "pool": "p", "replica": "r", "reason": ""},
    )
    await log(
        bus,
        rid,
        tenant,
        "inference",
        raw_output="Hello big world",
        sampling={"seed": 7, "max_tokens": 16, "temperature": 0.7},
        usage={"prompt_tokens": 5, "cached_tokens": 2, "completion_tokens": 3, "ttft_ms": 11.0, "tpot_ms": 2.0},
    )
    await log(
        bus,
        rid,
        tenant,
        "safety_out",
        status="complete",
        output="Hello big world",
        released="Hello big world",
        model="SmolLM2-135M-Instruct",
        mode="fast",
        **extra,
    )


@dataclass
class Env:
    gw: Gateway
    pipeline: Pipeline
    admin: str = ""
    acme: str = ""
    other: str = ""

    def h(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
async def env(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    data: Path = tmp_path_factory.mktemp("gwadmin")
    lbus = await connect(nats_server, "logger")
    settings = LoggerSettings(data_dir=str(data), durable=f"logger-{uuid.uuid4().hex[:8]}", fetch_timeout_s=0.2)
    cleanup = await logger_setup(lbus, settings)
    pbus = await connect(nats_server, "router")
    pipeline = Pipeline(pbus)
    await pbus.subscribe(subjects.ROUTE, Work, pipeline.on_work, queue="router")
    await pbus.subscribe(subjects.CONTEXT, Work, pipeline.on_work, queue="context")
    await pbus.subscribe(subjects.CONVERSATION_GET, ConversationQuery, pipeline.on_conversation, queue="context")
    async with gateway(nats_server, data, request_timeout_s=5.0) as g:
        e = Env(gw=g, pipeline=pipeline)
        _, e.admin = await g.keys.create("ops", "pro", user="root", admin=True)
        _, e.acme = await g.keys.create("acme", "pro", user="ann")
        _, e.other = await g.keys.create("globex", "pro", user="gus")
        yield e
    await pbus.drain()
    await lbus.quiesce()
    await cleanup()
    await lbus.close()


async def test_list_filters_stats_and_auth(env: Env) -> None:
    rid = f"l-{uuid.uuid4().hex[:8]}"
    await log_request(env.pipeline.bus, rid, tenant="acme-list")
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.admin)) as c:

        async def listed() -> list[dict[str, Any]]:
            r = await c.get("/v1/admin/requests", params={"tenant": "acme-list", "status": "complete"})
            assert r.status_code == 200, r.text
            return [x for x in r.json()["items"] if x["rid"] == rid]

        row = (await wait_for(listed))[0]
        assert row["ttft_ms"] == 11.0 and row["cached_tokens"] == 2 and row["mode"] == "fast"
        assert row["latency_ms"] is not None and row["safety_action"] is None
        r = await c.get("/v1/admin/requests", params={"tenant": "acme-list", "mode": "reasoning"})
        assert r.json()["items"] == []
        r = await c.get("/v1/admin/requests", params={"since": "2999-01-01T00:00:00Z"})
        assert r.json()["items"] == []
        r = await c.get("/v1/admin/requests", params={"since": "yesterday"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
        st = (await c.get("/v1/admin/stats", params={"window": "15m", "tenant": "acme-list"})).json()
        assert st["total"]["requests"] == 1 and st["bucket_s"] == 60 and len(st["buckets"]) in (15, 16)
        assert st["total"]["cache_hit_rate"] == 0.4
        assert (await c.get("/v1/admin/stats", params={"window": "soon"})).status_code == 400
    async with httpx.AsyncClient(base_url=env.gw.url) as c:
        assert (await c.get("/v1/admin/requests")).status_code == 401
        assert (await c.get("/v1/admin/requests", headers=env.h(env.acme))).status_code == 403
        assert (await c.get("/v1/admin/stats", headers=env.h(env.acme))).status_code == 403
        page = await c.get("/console")
        assert page.status_code == 200 and "console.js" in page.text
        assert (await c.get("/console/console.js")).headers["content-type"].startswith("text/javascript")
        assert (await c.get("/console/secrets.txt")).status_code == 404


async def test_feedback_own_tenant_only_and_exports(env: Env) -> None:
    a, b, theirs = (f"f-{uuid.uuid4().hex[:8]}" for _ in range(3))
    bus = env.pipeline.bus
    await log_request(bus, a)
    await log_request(bus, b)
    await log_request(bus, theirs, tenant="globex")
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.acme)) as c:
        r = await c.post("/v1/feedback", json={"rid": a, "rating": "up", "comment": "nice"})
        assert r.status_code == 202, r.text
        r = await c.post("/v1/feedback", json={"rid": theirs, "rating": "down"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = await c.post("/v1/feedback", json={"rid": a, "rating": "meh"})
        assert r.status_code == 400
        r = await c.post("/v1/feedback/preference", json={"rid_a": a, "rid_b": b, "chosen": "b"})
        assert r.status_code == 202 and r.json() == {"chosen": b, "rejected": a, "stored": True}
        r = await c.post("/v1/feedback/preference", json={"rid_a": a, "rid_b": theirs, "chosen": "a"})
        assert r.status_code == 404
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.admin)) as c:

        async def rated() -> dict[str, Any] | None:
            rec = (await c.get(f"/v1/admin/requests/{a}")).json()["record"]
            return rec if len(rec.get("feedback", [])) == 2 else None

        rec = await wait_for(rated)
        assert {(f["kind"], f["value"]) for f in rec["feedback"]} == {("thumbs", 1), ("preference", 1)}
        r = await c.get("/v1/admin/export/requests", params={"tenant": "acme"})
        rows = [json.loads(line) for line in r.text.splitlines()]
        mine = {row["rid"]: row for row in rows}
        assert a in mine and b in mine and theirs not in mine
        assert mine[a]["prompt"] == "<prompt>hi there</prompt>" and mine[a]["output"] == "Hello big world"
        r = await c.get("/v1/admin/export/preferences", params={"tenant": "acme"})
        pairs = [json.loads(line) for line in r.text.splitlines()]
        pair = next(p for p in pairs if p["chosen_rid"] == b)
        assert pair["rejected_rid"] == a and pair["prompt"] == "<prompt>hi there</prompt>"
        assert pair["chosen"] == "Hello big world"


async def test_replay_inference_matches_and_overrides_diff(env: Env) -> None:
    rid = f"r-{uuid.uuid4().hex[:8]}"
    await log_request(env.pipeline.bus, rid)
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.admin), timeout=30) as c:
        await wait_for(lambda: _has_output(c, rid))
        r = await c.post(f"/v1/admin/replay/{rid}", json={"mode": "inference"})
        assert r.status_code == 200, r.text
        res = r.json()
        assert res["matched"] and res["status"] == "complete" and res["output"] == "Hello big world"
        work = env.pipeline.works[-1]
        assert work.rid == res["rid"] and work.replay_of == rid and work.replay_mode == "inference"
        assert work.persist is False and work.chat_id is None and work.prompt == "<prompt>hi there</prompt>"
        assert work.sampling.seed == 7 and work.sampling.temperature == 0.7 and work.mode == "fast"
        r = await c.post(f"/v1/admin/replay/{rid}", json={"mode": "inference", "overrides": {"seed": 8}})
        res2 = r.json()
        assert not res2["matched"] and "-world" in res2["diff"] and "+moon" in res2["diff"]
        assert [s["op"] for s in res2["segments"]] == ["equal", "replace"]
        rec = (await c.get(f"/v1/admin/requests/{res2['rid']}")).json()["record"]
        assert rec["replay_of"] == rid and rec["api"] == "replay" and rec["overrides"] == {"seed": 8}
        replays = (await c.get("/v1/admin/requests", params={"replay_of": rid})).json()["items"]
        assert {x["rid"] for x in replays} == {res["rid"], res2["rid"]}
        assert (await c.post("/v1/admin/replay/nope", json={})).status_code == 404
        assert (await c.post(f"/v1/admin/replay/{rid}", json={"mode": "sideways"})).status_code == 400
        # An empty body is the default: inference mode, no overrides.
        assert (await c.post(f"/v1/admin/replay/{rid}")).json()["matched"]


async def test_replay_pipeline_uses_the_conversation_as_it_was(env: Env) -> None:
    bus = env.pipeline.bus
    await log_request(bus, "orig-chat", chat_id="chat-1")
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.admin), timeout=30) as c:
        await wait_for(lambda: _has_output(c, "orig-chat"))
        r = await c.post("/v1/admin/replay/orig-chat", json={"mode": "pipeline", "overrides": {"temperature": 0}})
        assert r.status_code == 200, r.text
        work = env.pipeline.works[-1]
        assert work.replay_mode == "pipeline" and work.chat_id is None and work.persist is False
        assert [(m.role, m.content) for m in work.messages] == [("user", "first"), ("assistant", "one")]
        assert work.text == "hi there" and work.sampling.temperature == 0 and work.prompt == ""


async def _has_output(c: httpx.AsyncClient, rid: str) -> bool:
    r = await c.get(f"/v1/admin/requests/{rid}")
    return r.status_code == 200 and "raw_output" in r.json()["record"] and "request" in r.json()["record"]


async def test_a_blocked_request_replays_only_through_the_pipeline(env: Env) -> None:
    rid = f"b-{uuid.uuid4().hex[:8]}"
    bus = env.pipeline.bus
    await log(bus, rid, "acme", "gateway", api="chat", request={"text": "bad", "user": "ann", "sampling": {"seed": 1}})
    await log(bus, rid, "acme", "context", prompt="<prompt>bad</prompt>")
    await log(bus, rid, "acme", "safety_in", safety_in=[], safety_action="block")
    async with httpx.AsyncClient(base_url=env.gw.url, headers=env.h(env.admin), timeout=30) as c:

        async def blocked() -> bool:
            r = await c.get(f"/v1/admin/requests/{rid}")
            return r.status_code == 200 and r.json()["record"].get("safety_action") == "block"

        await wait_for(blocked)
        r = await c.post(f"/v1/admin/replay/{rid}", json={"mode": "inference"})
        assert r.status_code == 400 and "pipeline mode" in r.json()["error"]["message"]
