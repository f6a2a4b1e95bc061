from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.records import RecordStore, merge_stage, requests, spans
from switchyard.schemas import (
    ContextPart,
    ErrorCode,
    ErrorInfo,
    Feedback,
    GatewayPart,
    LoggedRequest,
    ReplayPart,
    RequestListQuery,
    SafetyOutPart,
    SpanBatch,
    SpanRecord,
    StageRecord,
    Usage,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _stage(rid: str, stage: str, start: int, dur: float, **kw: Any) -> StageRecord:
    return StageRecord(
        rid=rid, stage=stage, replica="r1", tenant="acme", trace_id=TRACE, started_ms=start, duration_ms=dur, **kw
    )


def _pipeline(rid: str, t0: int = 1_000) -> list[StageRecord]:
    return [
        _stage(rid, "gateway", t0, 900.0, part=GatewayPart(api="chat", request=LoggedRequest(text="hi"))),
        _stage(
            rid, "context", t0 + 5, 3.0, decision={"prompt_tokens": 12}, part=ContextPart(prompt="<p>", chat_id="c1")
        ),
        _stage(
            rid,
            "safety_out",
            t0 + 20,
            880.0,
            decision={"redactions": 0},
            part=SafetyOutPart(
                status="complete",
                output="hello",
                usage=Usage(prompt_tokens=12, cached_tokens=8, completion_tokens=3, ttft_ms=41.5),
                finish_reason="stop",
                model="smollm2-135m",
            ),
        ),
    ]


async def test_stage_records_merge_into_one_record(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()
    stages = _pipeline("r1")
    # Arrival order does not matter, and a redelivered record changes nothing.
    await store.apply([stages[2]])
    await store.apply([stages[0], stages[1], stages[2]])
    got = await store.get("r1")
    assert got is not None
    summary, record = got
    assert set(record["stages"]) == {"gateway", "context", "safety_out"}
    assert record["stages"]["context"]["decision"] == {"prompt_tokens": 12}
    assert record["prompt"] == "<p>" and record["api"] == "chat" and record["output"] == "hello"
    assert record["rid"] == "r1" and record["trace_id"] == TRACE
    assert summary.status == "complete" and summary.model == "smollm2-135m" and summary.api == "chat"
    assert summary.created_ms == 1_000 and summary.latency_ms == 900.0
    assert (summary.prompt_tokens, summary.cached_tokens, summary.completion_tokens) == (12, 8, 3)
    assert summary.ttft_ms == 41.5 and summary.tenant == "acme"
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(requests))).scalar_one() == 1
    assert await store.get("nope") is None


def test_merge_is_idempotent_and_records_errors() -> None:
    err = _stage("r2", "safety_in", 10, 1.0, status="error", error=ErrorInfo.of(ErrorCode.policy_violation, "no"))
    once = merge_stage({}, err)
    assert merge_stage(once, err) == once
    assert once["error"] == {
        "stage": "safety_in",
        "type": "policy_violation",
        "code": "policy_violation",
        "message": "no",
    }


async def test_error_status_without_final_record(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()
    await store.apply([_stage("r3", "gateway", 5, 1.0)])
    got = await store.get("r3")
    assert got is not None and got[0].status == "running"
    await store.apply(
        [_stage("r3", "safety_in", 6, 1.0, status="error", error=ErrorInfo.of(ErrorCode.policy_violation, "x"))]
    )
    got = await store.get("r3")
    assert got is not None and got[0].status == "error" and got[1]["error"]["code"] == "policy_violation"


async def test_spans_are_idempotent_and_sorted(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()

    def span(sid: str, start: int, parent: str | None = None) -> SpanRecord:
        return SpanRecord(
            trace_id=TRACE,
            span_id=sid,
            parent_id=parent,
            name=f"op {sid}",
            service="svc",
            start_ns=start,
            end_ns=start + 10,
            attributes={"k": [1, 2]},
            events=[{"name": "e", "time_ns": start + 1, "attributes": {}}],
            rid="r1",
        )

    batch = SpanBatch(spans=[span("b" * 16, 20, "a" * 16), span("a" * 16, 10)])
    await store.apply([batch])
    await store.apply([batch, SpanBatch(spans=[span("c" * 16, 15, "a" * 16)])])
    got = await store.trace(TRACE)
    assert [s.span_id[0] for s in got] == ["a", "c", "b"]
    assert got[0].attributes == {"k": [1, 2]} and got[0].events[0]["name"] == "e"
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(spans))).scalar_one() == 3
    assert await store.trace("f" * 32) == []


async def test_list_filters_newest_first(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()
    for i in range(7):
        await store.apply(_pipeline(f"q{i}", t0=10_000 + i * 100))
    other = _stage("z1", "gateway", 99_999, 1.0)
    await store.apply([other.model_copy(update={"tenant": "zeta"})])
    items, cursor = await store.list_requests(RequestListQuery(tenant="acme", limit=3))
    assert [s.rid for s in items] == ["q6", "q5", "q4"] and cursor
    more, cursor2 = await store.list_requests(RequestListQuery(tenant="acme", limit=3, cursor=cursor))
    rest, cursor3 = await store.list_requests(RequestListQuery(tenant="acme", limit=3, cursor=cursor2))
    assert [s.rid for s in more + rest] == ["q3", "q2", "q1", "q0"] and cursor3 is None
    window = await store.list_requests(RequestListQuery(since_ms=10_100, until_ms=10_300))
    assert [s.rid for s in window[0]] == ["q2", "q1"]
    assert [s.rid for s in (await store.list_requests(RequestListQuery(status="running")))[0]] == ["z1"]
    assert len((await store.list_requests(RequestListQuery(model="smollm2-135m", limit=100)))[0]) == 7
    replay = _stage("q7", "gateway", 20_000, 1.0, part=ReplayPart(api="replay", replay_of="q3"))
    await store.apply([replay])
    replays, _ = await store.list_requests(RequestListQuery(replay_of="q3"))
    assert [(s.rid, s.api, s.replay_of) for s in replays] == [("q7", "replay", "q3")]


async def test_feedback_replaces_a_users_rating(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()
    await store.apply([Feedback(rid="r1", tenant="acme", user="u", value=1, created_ms=1)])
    await store.apply([Feedback(rid="r1", tenant="acme", user="u", value=-1, comment="wrong", created_ms=2)])
    await store.apply(
        [Feedback(rid="r2", tenant="acme", user="u", kind="preference", value=1, other_rid="r1", created_ms=3)]
    )
    got = await store.feedback(rid="r1")
    assert [(f.kind, f.value) for f in got] == [("preference", 1), ("thumbs", -1)]
    assert await store.feedback(tenant="zeta") == []
