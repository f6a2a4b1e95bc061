"""The operator's side of the record store: precedence, filters, stats, datasets, redaction, retention."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.records import RecordStore, feedback, requests
from switchyard.libs.store.sql import now_ms
from switchyard.schemas import (
    ContextPart,
    Feedback,
    GatewayOutcome,
    GatewayPart,
    InferencePart,
    LoggedRequest,
    PreferenceQuery,
    ReplayPart,
    RequestListQuery,
    SafetyInPart,
    SafetyOutcome,
    SafetyOutPart,
    SafetyVerdict,
    Sampling,
    StagePart,
    StageRecord,
    StatsQuery,
    ToolEvent,
    ToolsPart,
    Usage,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _stage(rid: str, stage: str, start: int, part: StagePart, tenant: str = "acme") -> StageRecord:
    return StageRecord(
        rid=rid,
        stage=stage,
        replica="r1",
        tenant=tenant,
        trace_id=TRACE,
        started_ms=start,
        duration_ms=10.0,
        part=part,
    )


def _verdict(category: str, detail: str = "") -> SafetyVerdict:
    return SafetyVerdict(category=category, score=0.1, action="allow", classifier="c", version="1", detail=detail)


def _request(rid: str, t0: int, *, tenant: str = "acme", status: str = "complete", **out: Any) -> list[StageRecord]:
    usage = {"prompt_tokens": 100, "cached_tokens": 60, "completion_tokens": 10, "ttft_ms": 40.0, "tpot_ms": 5.0}
    usage |= out.pop("usage", {})
    return [
        _stage(
            rid,
            "gateway",
            t0,
            GatewayPart(
                api="chat",
                request=LoggedRequest(text="secret question", user="ann"),
                gateway=GatewayOutcome(first_event_ms=99.0),
            ),
            tenant,
        ),
        _stage(rid, "context", t0 + 1, ContextPart(prompt="context prompt", chat_id="c1"), tenant),
        _stage(
            rid,
            "safety_in",
            t0 + 2,
            SafetyInPart(safety_in=[_verdict("x", "quoted")], safety_action=out.pop("action", "allow")),
            tenant,
        ),
        _stage(
            rid,
            "tools",
            t0 + 3,
            ToolsPart(
                prompt="final prompt with tools",
                tools=[
                    ToolEvent(id="t1", name="orders", output="A1001 shipped", arguments={"id": "A1001"}, status="ok")
                ],
            ),
            tenant,
        ),
        _stage(
            rid,
            "inference",
            t0 + 4,
            InferencePart(raw_output="raw answer", usage=Usage(**usage), sampling=Sampling(seed=7), model="m"),
            tenant,
        ),
        _stage(
            rid,
            "safety_out",
            t0 + 5,
            SafetyOutPart(
                status=status,
                output="answer",
                released="answer",
                usage=Usage(**usage),
                model="m",
                mode=out.pop("mode", "fast"),
                safety_out=SafetyOutcome(
                    redactions=[{"kind": "email", "text": "a@b.c"}], blocked=out.pop("blocked", None)
                ),
            ),
            tenant,
        ),
    ]


async def _store(engine: AsyncEngine, **kw: Any) -> RecordStore:
    store = RecordStore(engine, **kw)
    await store.init()
    return store


async def test_later_stage_wins_whatever_the_arrival_order(engine: AsyncEngine) -> None:
    store = await _store(engine)
    stages = _request("r1", 1_000)
    # tools' final prompt must win over context's even when context arrives last (a redelivery).
    await store.apply(list(reversed(stages)))
    got = await store.get("r1")
    assert got is not None
    summary, rec = got
    assert rec["prompt"] == "final prompt with tools"
    assert rec["sources"]["prompt"] == "tools" and rec["sources"]["usage"] == "safety_out"
    # What only the gateway saw stays under "gateway", apart from the engine's figures.
    assert rec["gateway"]["first_event_ms"] == 99.0 and "ttft_ms" not in rec
    assert summary.mode == "fast" and summary.safety_action == "allow" and summary.tpot_ms == 5.0
    assert summary.ttft_ms == 40.0 and summary.cached_tokens == 60


async def test_filters_and_pagination(engine: AsyncEngine) -> None:
    store = await _store(engine)
    await store.apply(_request("a", 1_000, mode="reasoning"))
    await store.apply(_request("b", 2_000, action="block", status="error"))
    await store.apply(_request("c", 3_000, tenant="other"))
    await store.apply([_stage("d", "gateway", 4_000, ReplayPart(api="replay", replay_of="a"))])
    assert [r.rid for r in (await store.list_requests(RequestListQuery(mode="reasoning")))[0]] == ["a"]
    assert [r.rid for r in (await store.list_requests(RequestListQuery(safety_action="block")))[0]] == ["b"]
    assert [r.rid for r in (await store.list_requests(RequestListQuery(replays=True)))[0]] == ["d"]
    assert [r.rid for r in (await store.list_requests(RequestListQuery(api="replay")))[0]] == ["d"]
    originals, _ = await store.list_requests(RequestListQuery(replays=False, tenant="acme"))
    assert [r.rid for r in originals] == ["b", "a"]
    page1, cur = await store.list_requests(RequestListQuery(limit=2))
    page2, cur2 = await store.list_requests(RequestListQuery(limit=2, cursor=cur))
    assert [r.rid for r in page1 + page2] == ["d", "c", "b", "a"] and cur2 is None


async def test_stats_buckets(engine: AsyncEngine) -> None:
    store = await _store(engine)
    base = now_ms() - 10 * 60_000
    base -= base % 60_000
    for i in range(6):
        await store.apply(_request(f"s{i}", base + i * 1000, usage={"ttft_ms": 10.0 * (i + 1)}))
    await store.apply(_request("blocked", base + 61_000, action="block", status="error"))
    await store.apply(_request("failed", base + 62_000, status="error"))
    await store.apply([_stage("rep", "gateway", base + 63_000, ReplayPart(api="replay", replay_of="s0"))])
    st = await store.stats(StatsQuery(window_s=3600, bucket_s=60, until_ms=base + 30 * 60_000))
    assert st.total.requests == 8 and st.total.errors == 1 and st.total.blocks == 1
    assert st.bucket_s == 60 and len(st.buckets) == 60
    first = next(b for b in st.buckets if b.start_ms == base)
    assert first.requests == 6 and first.ttft_p50_ms == 30.0 and first.ttft_p95_ms == 60.0
    assert first.cache_hit_rate == 0.6 and first.tpot_p50_ms == 5.0
    assert abs(st.requests_per_minute - 8 / 60) < 1e-9
    with_replays = await store.stats(StatsQuery(window_s=3600, include_replays=True, until_ms=base + 30 * 60_000))
    assert with_replays.total.requests == 9


async def test_opted_out_tenant_never_stores_raw_text(engine: AsyncEngine) -> None:
    store = await _store(engine, no_raw_text_tenants=["private"])
    await store.apply(_request("p1", 1_000, tenant="private"))
    await store.apply([Feedback(rid="p1", tenant="private", user="u", value=-1, comment="my words")])
    await store.apply(_request("o1", 1_000))
    async with engine.connect() as conn:
        # Table objects, not SQL text, so the per-test PostgreSQL schema applies.
        raw = " ".join(str(r) for r in (await conn.execute(select(requests).where(requests.c.rid == "p1"))).all())
        raw += " ".join(str(r) for r in (await conn.execute(select(feedback))).all())
    for secret in (
        "secret question",
        "context prompt",
        "final prompt",
        "raw answer",
        "A1001",
        "a@b.c",
        "quoted",
        "my words",
    ):
        assert secret not in raw, secret
    got = await store.get("p1")
    assert got is not None
    rec = got[1]
    assert rec["prompt"]["chars"] == len("final prompt with tools") and len(rec["prompt"]["sha256"]) == 64
    assert rec["usage"]["completion_tokens"] == 10 and got[0].status == "complete"
    other = await store.get("o1")
    assert other is not None and other[1]["prompt"] == "final prompt with tools"


async def test_retention_purge_scrubs_old_text_and_stays_scrubbed(engine: AsyncEngine) -> None:
    store = await _store(engine)
    old = now_ms() - 3 * 86_400_000
    stages = _request("old", old)
    await store.apply(stages)
    await store.apply(_request("new", now_ms()))
    assert await store.purge_text(now_ms() - 86_400_000) == 1
    assert await store.purge_text(now_ms() - 86_400_000) == 0  # already done
    await store.apply(stages)  # a redelivered stage record must not bring the text back
    got_old, got_new = await store.get("old"), await store.get("new")
    assert got_old is not None and got_new is not None
    assert isinstance(got_old[1]["output"], dict) and got_old[1]["output"]["chars"] == len("answer")
    assert got_new[1]["output"] == "answer"
    assert await store.delete_before(now_ms() - 86_400_000) == 1
    assert await store.get("old") is None and await store.get("new") is not None


async def test_dataset_rows_and_preference_pairs(engine: AsyncEngine) -> None:
    store = await _store(engine)
    await store.apply(_request("x", 1_000))
    await store.apply(_request("y", 2_000))
    await store.apply(
        [
            Feedback(rid="y", tenant="acme", user="u", kind="preference", value=1, other_rid="x", created_ms=5),
            Feedback(rid="x", tenant="acme", user="u", value=1, created_ms=6),
        ]
    )
    rows, nxt = await store.export(RequestListQuery(limit=10))
    assert nxt is None and [r["rid"] for r in rows] == ["y", "x"]
    x = rows[1]
    assert x["text"] == "secret question" and x["prompt"] == "final prompt with tools" and x["output"] == "answer"
    assert x["raw_output"] == "raw answer" and x["sampling"]["seed"] == 7 and x["feedback"][0]["value"] == 1
    pairs, _ = await store.preferences(PreferenceQuery())
    assert len(pairs) == 1
    p = pairs[0]
    assert (p.chosen_rid, p.rejected_rid, p.prompt, p.text) == ("y", "x", "final prompt with tools", "secret question")
    assert p.chosen == "answer" and p.rejected == "answer"


async def test_old_database_gets_new_columns(engine: AsyncEngine) -> None:
    if engine.dialect.name != "sqlite":
        return
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE requests (rid VARCHAR PRIMARY KEY, tenant VARCHAR NOT NULL, status VARCHAR(32) NOT NULL, "
                "model VARCHAR, api VARCHAR(32), trace_id VARCHAR(32) NOT NULL, created_ms BIGINT NOT NULL, "
                "updated_ms BIGINT NOT NULL, latency_ms FLOAT, ttft_ms FLOAT, prompt_tokens INTEGER, "
                "cached_tokens INTEGER, completion_tokens INTEGER, replay_of VARCHAR, record JSON NOT NULL)"
            )
        )
    store = await _store(engine)
    await store.apply(_request("m1", 1_000))
    got = await store.get("m1")
    assert got is not None and got[0].mode == "fast"
