from __future__ import annotations

import asyncio
import uuid

import pytest
from pydantic import BaseModel

from switchyard.libs.bus import Bus, BusError, NatsServer, current_context
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ChatEvent, ErrorCode, Forward, Work, WorkAccepted, subjects


class Ping(BaseModel):
    n: int


class Pong(BaseModel):
    n: int
    rid: str
    tenant: str


async def _bus(server: NatsServer, name: str) -> Bus:
    return await Bus.connect(server.url, name, uuid.uuid4().hex[:6], setup_tracing(name))


async def test_request_reply_carries_headers(nats_server: NatsServer) -> None:
    a, b = await _bus(nats_server, "a"), await _bus(nats_server, "b")
    subject = f"t.{uuid.uuid4().hex}"

    async def handler(p: Ping) -> Pong:
        ctx = current_context()
        return Pong(n=p.n + 1, rid=ctx.rid, tenant=ctx.tenant)

    await b.subscribe(subject, Ping, handler, queue="b")
    await b.flush()
    reply = await a.request(subject, Ping(n=1), Pong, rid="r1", tenant="acme")
    assert reply == Pong(n=2, rid="r1", tenant="acme")
    await a.drain()
    await b.drain()


async def test_errors_become_coded_replies(nats_server: NatsServer) -> None:
    a, b = await _bus(nats_server, "a"), await _bus(nats_server, "b")
    subject = f"t.{uuid.uuid4().hex}"

    async def handler(p: Ping) -> Pong:
        if p.n < 0:
            raise BusError(ErrorCode.bad_request, "negative")
        raise RuntimeError("boom")

    await b.subscribe(subject, Ping, handler)
    await b.flush()
    with pytest.raises(BusError) as e:
        await a.request(subject, Ping(n=-1), Pong)
    assert e.value.code == ErrorCode.bad_request
    with pytest.raises(BusError) as e:
        await a.request(subject, Ping(n=1), Pong)
    assert e.value.code == ErrorCode.internal
    # Expired work is dropped with deadline_exceeded, and the handler never runs.
    with pytest.raises(BusError) as e:
        await a.request(subject, Ping(n=1), Pong, deadline_ms=now_ms() - 1)
    assert e.value.code == ErrorCode.deadline_exceeded
    with pytest.raises(BusError) as e:
        await a.request(f"nobody.{uuid.uuid4().hex}", Ping(n=1), Pong)
    assert e.value.code == ErrorCode.unavailable
    await a.drain()
    await b.drain()


async def test_stage_forwards_or_emits_error(nats_server: NatsServer) -> None:
    a, b = await _bus(nats_server, "a"), await _bus(nats_server, "stage")
    await a.ensure_log_stream()
    inbox = f"t.{uuid.uuid4().hex}"

    async def handler(w: Work) -> Forward:
        if w.text == "bad":
            raise BusError(ErrorCode.policy_violation, "no")
        return Forward(subject=inbox, work=w.model_copy(update={"prompt": "p"}), decision={"ok": True})

    stage_subject = f"pipeline.t{uuid.uuid4().hex[:6]}"
    await b.stage(stage_subject, handler)
    got: asyncio.Queue[Work] = asyncio.Queue()
    events: asyncio.Queue[ChatEvent] = asyncio.Queue()

    async def collect(w: Work) -> None:
        await a.ack(WorkAccepted(rid=w.rid, replica=a.replica))  # as the next stage acks the hand-over
        await got.put(w)

    async def collect_ev(e: ChatEvent) -> None:
        await events.put(e)

    await a.subscribe(inbox, Work, collect)
    await a.subscribe(subjects.chat_events("r-bad"), ChatEvent, collect_ev)
    await a.flush()
    await b.flush()
    await a.publish(stage_subject, Work(rid="r-ok", tenant="t", user="u", key_id="k", text="hi"), rid="r-ok")
    w = await asyncio.wait_for(got.get(), 5)
    assert w.prompt == "p" and w.rid == "r-ok"
    await a.publish(stage_subject, Work(rid="r-bad", tenant="t", user="u", key_id="k", text="bad"), rid="r-bad")
    # The stage says it holds the request first (the gateway's liveness watch asks that replica later).
    held = await asyncio.wait_for(events.get(), 5)
    assert held.type == "holder" and held.stage == b.service and held.replica == b.replica
    ev = await asyncio.wait_for(events.get(), 5)
    assert ev.type == "error" and ev.error is not None and ev.error.code == ErrorCode.policy_violation
    await a.drain()
    await b.drain()


async def test_flush_means_another_connection_sees_the_subscription(nats_server: NatsServer) -> None:
    # nats-py's flush() can get its PONG before a queued SUB reaches the server; Bus.flush must
    # not: a request right after it failed with "no responders" about 1 time in 10 here.
    for i in range(60):
        a, b = await _bus(nats_server, "a"), await _bus(nats_server, "b")
        subject = f"t.{uuid.uuid4().hex}"

        async def handler(p: Ping) -> Pong:
            return Pong(n=p.n + 1, rid="", tenant="")

        await b.subscribe(subject, Ping, handler)
        await b.flush()
        assert await a.request(subject, Ping(n=i), Pong) == Pong(n=i + 1, rid="", tenant="")
        await a.drain()
        await b.drain()
