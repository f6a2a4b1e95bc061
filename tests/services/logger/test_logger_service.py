"""The logger against a real nats-server with JetStream and a SQLite store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from switchyard.libs.bus import Bus, BusError, NatsServer
from switchyard.libs.bus.bus import stable_id
from switchyard.libs.store.db import make_engine
from switchyard.libs.store.records import RecordStore, spans
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import (
    ContextPart,
    ErrorCode,
    Feedback,
    FeedbackList,
    FeedbackQuery,
    GatewayPart,
    LoggedRequest,
    RequestList,
    RequestListQuery,
    RequestQuery,
    RequestRecordReply,
    SafetyOutPart,
    SpanBatch,
    SpanRecord,
    StageRecord,
    Usage,
    subjects,
)
from switchyard.schemas.subjects import ADMIN_FEEDBACK_LIST, ADMIN_REQUESTS_LIST, LOG_FEEDBACK
from switchyard.services.logger.service import setup
from switchyard.services.logger.settings import LoggerSettings
from tests.wait import wait_for


class Logger:
    """A logger service in this process that can be stopped and started again on the same database."""

    def __init__(self, server: NatsServer, data_dir: Path, attach_nats_spans: bool = False):
        self.server = server
        self.settings = LoggerSettings(
            data_dir=str(data_dir), durable=f"logger-{uuid.uuid4().hex[:8]}", fetch_timeout_s=0.3
        )
        self.attach = attach_nats_spans
        self.bus: Bus | None = None
        self.cleanup: Callable[[], Awaitable[None]] | None = None

    async def start(self) -> None:
        telemetry = setup_tracing("logger")
        self.bus = await Bus.connect(self.server.url, "logger", uuid.uuid4().hex[:6], telemetry)
        if self.attach:
            bus = self.bus

            async def publish_spans(batch: SpanBatch) -> None:
                first = batch.spans[0]
                await bus.publish_durable(
                    subjects.LOG_SPANS, batch, stable_id(first.trace_id, first.span_id, str(len(batch.spans)))
                )

            telemetry.attach_nats(asyncio.get_running_loop(), publish_spans)
        self.cleanup = await setup(self.bus, self.settings)
        await self.bus.flush()

    async def stop(self) -> None:
        assert self.bus is not None and self.cleanup is not None
        await self.bus.quiesce()
        await self.cleanup()
        await self.bus.telemetry.shutdown()
        await self.bus.close()

    def store(self) -> RecordStore:
        return RecordStore(make_engine(self.settings.db_url()))


async def _client(server: NatsServer) -> Bus:
    bus = await Bus.connect(server.url, "gateway", "t", setup_tracing("gateway"))
    await bus.ensure_log_stream()
    return bus


async def _all_spans_stored(logger: Logger, client: Bus) -> None:
    """Until every span the logger has made so far is stored: its exporter flushes them into the log
    stream, then a feedback published after them is waited for; the consumer takes the stream in order."""
    assert logger.bus is not None
    assert await asyncio.to_thread(logger.bus.telemetry.provider.force_flush, 10_000)
    marker = "barrier-" + uuid.uuid4().hex[:8]
    await client.publish_durable(LOG_FEEDBACK, Feedback(rid=marker, tenant="acme", value=1), f"fb-{marker}")

    async def stored() -> bool:
        got = await client.request(ADMIN_FEEDBACK_LIST, FeedbackQuery(rid=marker), FeedbackList)
        return bool(got.items)

    await wait_for(stored)


async def _span_count(store: RecordStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(spans))).scalar_one())


def _record(rid: str, stage: str = "gateway", **kw: object) -> StageRecord:
    return StageRecord(rid=rid, stage=stage, tenant="acme", trace_id="ab" * 16, started_ms=1_000, duration_ms=5.0, **kw)  # type: ignore[arg-type]


async def test_records_published_while_down_are_written_once(nats_server: NatsServer, tmp_path: Path) -> None:
    client = await _client(nats_server)
    logger = Logger(nats_server, tmp_path)
    await logger.start()
    store = logger.store()
    first = uuid.uuid4().hex
    await client.log_stage(_record(first))
    await wait_for(lambda: _exists(store, first))
    await logger.stop()

    rids = [f"down-{uuid.uuid4().hex[:8]}-{i}" for i in range(25)]
    for rid in rids:
        await client.log_stage(_record(rid))
        await client.log_stage(_record(rid, "context", part=ContextPart(prompt="p")))
    # Same Nats-Msg-Id (`rid:stage`): JetStream keeps one copy.
    await client.log_stage(_record(rids[0]))

    await logger.start()

    async def all_written() -> bool:
        return all([await _exists(store, rid) for rid in rids])

    await wait_for(all_written)
    for rid in rids:
        got = await store.get(rid)
        assert got is not None and set(got[1]["stages"]) == {"gateway", "context"} and got[1]["prompt"] == "p"
    assert logger.bus is not None
    info = await logger.bus.js.consumer_info(subjects.LOG_STREAM, logger.settings.durable)
    assert info.num_ack_pending == 0
    await logger.stop()
    await store.engine.dispose()
    await client.drain()


async def _exists(store: RecordStore, rid: str) -> bool:
    return await store.get(rid) is not None


async def test_duplicate_publish_is_stored_once(nats_server: NatsServer, tmp_path: Path) -> None:
    client = await _client(nats_server)
    logger = Logger(nats_server, tmp_path)
    await logger.start()
    rid = uuid.uuid4().hex
    rec = _record(rid)
    ack1 = await client.js.publish(
        subjects.log_stage("gateway"), rec.model_dump_json().encode(), headers={"Nats-Msg-Id": f"{rid}:gateway"}
    )
    ack2 = await client.js.publish(
        subjects.log_stage("gateway"), rec.model_dump_json().encode(), headers={"Nats-Msg-Id": f"{rid}:gateway"}
    )
    assert ack2.duplicate and ack2.seq == ack1.seq
    store = logger.store()
    await wait_for(lambda: _exists(store, rid))
    items, _ = await store.list_requests(RequestListQuery(tenant="acme", limit=500))
    assert [s.rid for s in items].count(rid) == 1
    await logger.stop()
    await store.engine.dispose()
    await client.drain()


async def test_merged_record_and_trace_over_the_bus(nats_server: NatsServer, tmp_path: Path) -> None:
    client = await _client(nats_server)
    logger = Logger(nats_server, tmp_path, attach_nats_spans=True)
    await logger.start()
    rid = uuid.uuid4().hex
    trace_id = uuid.uuid4().hex

    def span(sid: str, start: int, parent: str | None) -> SpanRecord:
        return SpanRecord(
            trace_id=trace_id,
            span_id=sid,
            parent_id=parent,
            name=f"op{sid[0]}",
            service="gateway",
            start_ns=start,
            end_ns=start + 5,
            rid=rid,
        )

    batch = SpanBatch(spans=[span("2" * 16, 20, "1" * 16), span("1" * 16, 10, None)])
    await client.publish_durable(subjects.LOG_SPANS, batch, f"spans-{rid}")
    await client.publish_durable(subjects.LOG_SPANS, batch, f"spans-{rid}-again")  # redelivery-like
    base = dict(tenant="acme", trace_id=trace_id, started_ms=5_000)
    # A traceparent so the logger's consumer span joins this trace.
    parent = {"traceparent": f"00-{trace_id}-{'1' * 16}-01", "Nats-Msg-Id": f"{rid}:x"}
    records = [
        StageRecord(
            rid=rid,
            stage="gateway",
            duration_ms=50.0,
            part=GatewayPart(api="openai", request=LoggedRequest(text="hi")),
            **base,
        ),  # type: ignore[arg-type]
        StageRecord(
            rid=rid,
            stage="context",
            duration_ms=2.0,
            decision={"prompt_tokens": 9},
            part=ContextPart(prompt="P", prompt_tokens=9),
            **base,
        ),  # type: ignore[arg-type]
        StageRecord(
            rid=rid,
            stage="safety_out",
            duration_ms=40.0,
            part=SafetyOutPart(
                status="complete", output="hi", usage=Usage(prompt_tokens=9, completion_tokens=2), model="m1"
            ),
            **base,  # type: ignore[arg-type]
        ),
    ]
    for r in records:
        await client.js.publish(
            subjects.log_stage(r.stage),
            r.model_dump_json().encode(),
            headers={**parent, "Nats-Msg-Id": f"{rid}:{r.stage}"},
        )
    await client.publish_durable(LOG_FEEDBACK, Feedback(rid=rid, tenant="acme", user="u", value=1), f"fb-{rid}")

    async def complete() -> bool:
        try:
            got = await client.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
        except BusError:
            return False
        names = {s.name for s in got.spans}
        return (
            got.record.get("status") == "complete" and "feedback" in got.record and any(n == "store LOG" for n in names)
        )

    await wait_for(complete)
    got = await client.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
    rec = got.record
    assert set(rec["stages"]) == {"gateway", "context", "safety_out"}
    assert rec["api"] == "openai" and rec["prompt"] == "P" and rec["output"] == "hi" and rec["model"] == "m1"
    assert rec["prompt_tokens"] == 9 and rec["latency_ms"] == 50.0 and rec["feedback"][0]["value"] == 1
    starts = [s.start_ns for s in got.spans]
    assert starts == sorted(starts)
    mine = [s for s in got.spans if s.service == "gateway"]
    assert [s.span_id[0] for s in mine] == ["1", "2"]
    consumer = [s for s in got.spans if s.service == "logger"]
    assert consumer and all(s.parent_id == "1" * 16 and s.rid == rid for s in consumer)

    # Storing spans makes no new spans: the count settles instead of growing forever. Settled once
    # (every consumer span of the records above stored), a second flush-and-barrier must add nothing.
    # Counted over the whole store: a span made while storing a span batch would start a trace of its own.
    store = logger.store()
    await _all_spans_stored(logger, client)
    # One store span per request and batch, not one per record: together they name each record once.
    got = await client.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
    consumer = [s for s in got.spans if s.service == "logger"]
    assert all(s.name == "store LOG" for s in consumer)
    assert sum(s.attributes["messaging.batch.message_count"] for s in consumer) == len(records)
    stored = sorted(x for s in consumer for x in s.attributes["switchyard.subjects"])
    assert stored == sorted(subjects.log_stage(r.stage) for r in records)
    before = await _span_count(store)
    await _all_spans_stored(logger, client)
    assert await _span_count(store) == before

    listed = await client.request(ADMIN_REQUESTS_LIST, RequestListQuery(model="m1", status="complete"), RequestList)
    assert rid in [s.rid for s in listed.items]
    fb = await client.request(ADMIN_FEEDBACK_LIST, FeedbackQuery(rid=rid), FeedbackList)
    assert [f.value for f in fb.items] == [1]
    with pytest.raises(BusError) as e:
        await client.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid="unknown-" + rid), RequestRecordReply)
    assert e.value.code == ErrorCode.not_found
    await logger.stop()
    await store.engine.dispose()
    await client.drain()


async def test_unreadable_message_does_not_block(nats_server: NatsServer, tmp_path: Path) -> None:
    client = await _client(nats_server)
    logger = Logger(nats_server, tmp_path)
    await logger.start()
    await client.js.publish(subjects.log_stage("gateway"), b"not json", headers={"Nats-Msg-Id": uuid.uuid4().hex})
    rid = uuid.uuid4().hex
    await client.log_stage(_record(rid))
    store = logger.store()
    await wait_for(lambda: _exists(store, rid))
    await logger.stop()
    await store.engine.dispose()
    await client.drain()


async def test_a_failing_record_is_retried_then_dropped_without_blocking_others(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    poison = "poison-" + uuid.uuid4().hex[:8]
    attempts: list[int] = []
    real_apply = RecordStore.apply

    async def flaky_apply(self: RecordStore, items: list[object]) -> None:
        if any(isinstance(i, StageRecord) and i.rid == poison for i in items):
            attempts.append(len(items))
            raise RuntimeError("database says no")
        await real_apply(self, items)  # type: ignore[arg-type]

    monkeypatch.setattr(RecordStore, "apply", flaky_apply)
    client = await _client(nats_server)
    logger = Logger(nats_server, tmp_path)
    logger.settings.max_deliver = 2
    await logger.start()
    good = uuid.uuid4().hex
    await client.log_stage(_record(poison))
    await client.log_stage(_record(good))
    store = logger.store()
    await wait_for(lambda: _exists(store, good))
    assert logger.bus is not None

    async def settled() -> bool:
        assert logger.bus is not None
        info = await logger.bus.js.consumer_info(subjects.LOG_STREAM, logger.settings.durable)
        return info.num_ack_pending == 0 and info.num_pending == 0 and len(attempts) >= 2

    await wait_for(settled)
    assert not await _exists(store, poison)
    await logger.stop()
    await store.engine.dispose()
    await client.drain()
