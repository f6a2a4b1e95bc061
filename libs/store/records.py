"""Request records, spans and feedback, written by the logger from JetStream `LOG`.

A request's record is one JSON document keyed by rid, merged from every stage's StageRecord:
`stages[<stage>]` holds that stage's timing, status and decision, and each decision's `record` dict is
merged into the top level (gateway: api and request; context: prompt; safety_out: status, output,
usage, model). Merging is idempotent, so a redelivered message changes nothing. A few fields are
copied into columns so the console can filter without parsing JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    and_,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from libs.store.db import create_all
from libs.store.sql import decode_cursor, encode_cursor, insert_ignore, now_ms, upsert
from schemas import Feedback, RequestListQuery, RequestSummary, SpanBatch, SpanRecord, StageRecord

metadata = MetaData()

requests = Table(
    "requests",
    metadata,
    Column("rid", String(), primary_key=True),
    Column("tenant", String(), nullable=False, default=""),
    Column("status", String(32), nullable=False, default="running"),
    Column("model", String()),
    Column("api", String(32)),
    Column("trace_id", String(32), nullable=False, default=""),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("latency_ms", Float),
    Column("ttft_ms", Float),
    Column("prompt_tokens", Integer),
    Column("cached_tokens", Integer),
    Column("completion_tokens", Integer),
    # The rid this request replays (gateway record key `replay_of`, api "replay").
    Column("replay_of", String()),
    Column("record", JSON, nullable=False),
    Index("ix_requests_created", "created_ms"),
    Index("ix_requests_replay_of", "replay_of"),
    Index("ix_requests_tenant_created", "tenant", "created_ms"),
    Index("ix_requests_trace", "trace_id"),
)

spans = Table(
    "spans",
    metadata,
    Column("trace_id", String(32), nullable=False),
    Column("span_id", String(16), nullable=False),
    Column("parent_id", String(16)),
    Column("rid", String()),
    Column("service", String(), nullable=False),
    Column("name", String(), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("start_ns", BigInteger, nullable=False),
    Column("end_ns", BigInteger, nullable=False),
    Column("attributes", JSON, nullable=False),
    Column("events", JSON, nullable=False),
    PrimaryKeyConstraint("trace_id", "span_id"),
    Index("ix_spans_rid", "rid"),
)

feedback = Table(
    "feedback",
    metadata,
    # One rating per (rid, user, kind): a user who changes their mind replaces their rating.
    Column("rid", String(), nullable=False),
    Column("user", String(), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("tenant", String(), nullable=False),
    Column("value", Integer, nullable=False),
    Column("other_rid", String()),
    Column("comment", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("rid", "user", "kind"),
    Index("ix_feedback_tenant", "tenant", "created_ms"),
)

Item = StageRecord | SpanBatch | Feedback


def merge_stage(record: dict[str, Any], stage: StageRecord) -> dict[str, Any]:
    """`record` with one stage's part merged in; applying the same stage twice gives the same record."""
    out = dict(record)
    decision = dict(stage.decision)
    top = decision.pop("record", None)
    stages = dict(out.get("stages") or {})
    stages[stage.stage] = {
        "replica": stage.replica,
        "started_ms": stage.started_ms,
        "duration_ms": stage.duration_ms,
        "status": stage.status,
        "decision": decision,
        "error": stage.error.model_dump(mode="json") if stage.error else None,
    }
    out["stages"] = stages
    if isinstance(top, dict):
        out.update({k: v for k, v in top.items() if k != "stages"})
    out["rid"] = stage.rid
    for key in ("tenant", "trace_id"):
        value = getattr(stage, key)
        if value and not out.get(key):
            out[key] = value
    if stage.error and not out.get("error"):
        out["error"] = {"stage": stage.stage, **stage.error.model_dump(mode="json")}
    return out


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The filterable columns of a record."""
    stages: dict[str, dict[str, Any]] = record.get("stages") or {}
    starts = [s["started_ms"] for s in stages.values()]
    ends = [s["started_ms"] + s["duration_ms"] for s in stages.values()]
    created = min(starts) if starts else now_ms()
    status = record.get("status")
    if not isinstance(status, str):
        status = "error" if any(s["status"] == "error" for s in stages.values()) else "running"
    usage = record.get("usage") if isinstance(record.get("usage"), dict) else {}
    assert isinstance(usage, dict)

    def tokens(key: str) -> int | None:
        v = _num(usage.get(key))
        return None if v is None else int(v)

    model = record.get("model")
    api = record.get("api")
    replay_of = record.get("replay_of")
    return {
        "tenant": str(record.get("tenant") or ""),
        "trace_id": str(record.get("trace_id") or ""),
        "status": status[:32],
        "model": str(model)[:200] if model else None,
        "api": str(api)[:32] if api else None,
        "replay_of": str(replay_of) if replay_of else None,
        "created_ms": int(created),
        "latency_ms": (max(ends) - created) if ends else None,
        "ttft_ms": _num(usage.get("ttft_ms")),
        "prompt_tokens": tokens("prompt_tokens"),
        "cached_tokens": tokens("cached_tokens"),
        "completion_tokens": tokens("completion_tokens"),
    }


def _summary(row: Any) -> RequestSummary:
    m = row._mapping
    return RequestSummary(**{k: m[k] for k in RequestSummary.model_fields})


def _span(row: Any) -> SpanRecord:
    m = row._mapping
    return SpanRecord(**{k: m[k] for k in SpanRecord.model_fields})


class RecordStore:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    async def init(self) -> None:
        await create_all(self.engine, metadata)

    async def apply(self, items: Sequence[Item]) -> None:
        """Write a batch in one transaction: after it returns, every item is durable (ack then)."""
        by_rid: dict[str, list[StageRecord]] = {}
        span_rows: list[dict[str, Any]] = []
        ratings: list[Feedback] = []
        for item in items:
            if isinstance(item, StageRecord):
                by_rid.setdefault(item.rid, []).append(item)
            elif isinstance(item, Feedback):
                ratings.append(item)
            else:
                span_rows.extend(s.model_dump() for s in item.spans)
        async with self.engine.begin() as conn:
            for rid, stages in by_rid.items():
                await self._merge(conn, rid, stages)
            if span_rows:
                await conn.execute(insert_ignore(conn, spans, ["trace_id", "span_id"]), span_rows)
            for fb in ratings:
                await conn.execute(
                    upsert(conn, feedback, ["rid", "user", "kind"], ["value", "other_rid", "comment", "created_ms"]),
                    {**fb.model_dump(), "created_ms": fb.created_ms or now_ms()},
                )

    async def _merge(self, conn: AsyncConnection, rid: str, stages: list[StageRecord]) -> None:
        now = now_ms()
        # Insert-then-lock: the row exists before FOR UPDATE, so two logger replicas merging the same
        # rid serialize on PostgreSQL instead of overwriting each other (SQLite has one writer anyway).
        await conn.execute(
            insert_ignore(conn, requests, ["rid"]).values(rid=rid, created_ms=now, updated_ms=now, record={})
        )
        row = (await conn.execute(select(requests.c.record).where(requests.c.rid == rid).with_for_update())).first()
        record: dict[str, Any] = dict(row[0]) if row and row[0] else {}
        for stage in stages:
            record = merge_stage(record, stage)
        await conn.execute(
            update(requests).where(requests.c.rid == rid).values(record=record, updated_ms=now, **summarize(record))
        )

    async def get(self, rid: str) -> tuple[RequestSummary, dict[str, Any]] | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(requests).where(requests.c.rid == rid))).first()
        if row is None:
            return None
        return _summary(row), dict(row.record)

    async def trace(self, trace_id: str) -> list[SpanRecord]:
        """Every span of a trace, by start time (a waterfall's order)."""
        q = select(spans).where(spans.c.trace_id == trace_id).order_by(spans.c.start_ns, spans.c.span_id)
        async with self.engine.connect() as conn:
            return [_span(r) for r in (await conn.execute(q)).all()]

    async def list_requests(self, q: RequestListQuery) -> tuple[list[RequestSummary], str | None]:
        c = requests.c
        sel = select(requests)
        for col, value in ((c.tenant, q.tenant), (c.status, q.status), (c.model, q.model), (c.replay_of, q.replay_of)):
            if value:
                sel = sel.where(col == value)
        if q.since_ms is not None:
            sel = sel.where(c.created_ms >= q.since_ms)
        if q.until_ms is not None:
            sel = sel.where(c.created_ms < q.until_ms)
        after = decode_cursor(q.cursor, 2)
        if after is not None:
            sel = sel.where(or_(c.created_ms < after[0], and_(c.created_ms == after[0], c.rid < after[1])))
        sel = sel.order_by(c.created_ms.desc(), c.rid.desc()).limit(q.limit + 1)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sel)).all()
        items = [_summary(r) for r in rows[: q.limit]]
        nxt = encode_cursor(items[-1].created_ms, items[-1].rid) if len(rows) > q.limit else None
        return items, nxt

    async def feedback(self, tenant: str | None = None, rid: str | None = None, limit: int = 100) -> list[Feedback]:
        f = feedback.c
        sel = select(feedback)
        if tenant:
            sel = sel.where(f.tenant == tenant)
        if rid:
            sel = sel.where(or_(f.rid == rid, f.other_rid == rid))
        sel = sel.order_by(f.created_ms.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sel)).all()
        return [Feedback(**{k: r._mapping[k] for k in Feedback.model_fields}) for r in rows]
