"""Request records, spans and feedback, written by the logger from JetStream `LOG`.

A request's record is one JSON document keyed by rid, merged from every stage's StageRecord:
`stages[<stage>]` holds that stage's timing, status and decision, and the fields of its typed part
(`switchyard.schemas.records.StagePart`) are merged into the top level (gateway: api and request; context: prompt;
tools: the final prompt; safety_out: status, output, usage, model). When two stages set the same key,
the later stage of the pipeline wins whatever the arrival order (`sources` remembers who set each key),
so a record rebuilt from a redelivered stream is the same record. Merging is idempotent, so a
redelivered message changes nothing. A few fields are copied into columns so the console can filter
without parsing JSON.

Tenants listed in `no_raw_text_tenants` never have raw text written: their records are scrubbed before
the write. `purge_text` does the same to every record older than the retention cutoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
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
    bindparam,
    delete,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from switchyard.libs.store.db import add_missing_columns, create_all
from switchyard.libs.store.record_merge import merge_stage, summarize
from switchyard.libs.store.record_stats import Row, aggregate, pick_bucket_s
from switchyard.libs.store.record_text import answer_text, dataset_row, digest, scrub
from switchyard.libs.store.record_usage import key_usage
from switchyard.libs.store.sql import decode_cursor, encode_cursor, insert_ignore, now_ms, upsert
from switchyard.schemas import (
    Feedback,
    PreferencePair,
    PreferenceQuery,
    RequestListQuery,
    RequestRecord,
    RequestSummary,
    SpanBatch,
    SpanRecord,
    StageRecord,
    Stats,
    StatsQuery,
)
from switchyard.schemas.keys import KeyUsage, KeyUsageQuery

metadata = MetaData()

requests = Table(
    "requests",
    metadata,
    Column("rid", String(), primary_key=True),
    Column("tenant", String(), nullable=False, default=""),
    Column("status", String(32), nullable=False, default="running"),
    Column("model", String()),
    Column("api", String(32)),
    Column("mode", String(16)),
    Column("safety_action", String(16)),
    Column("trace_id", String(32), nullable=False, default=""),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("latency_ms", Float),
    Column("ttft_ms", Float),
    Column("tpot_ms", Float),
    Column("prompt_tokens", Integer),
    Column("cached_tokens", Integer),
    Column("completion_tokens", Integer),
    # The rid this request replays (gateway record key `replay_of`, api "replay").
    Column("replay_of", String()),
    # Raw text removed (retention): the purge skips these rows.
    Column("text_purged", Boolean, nullable=False, default=False),
    Column("record", JSON, nullable=False),
    # The API key that sent it (gateway record key `key_id`): usage per key.
    Column("key_id", String(64)),
    Index("ix_requests_created", "created_ms"),
    Index("ix_requests_replay_of", "replay_of"),
    Index("ix_requests_tenant_created", "tenant", "created_ms"),
    Index("ix_requests_trace", "trace_id"),
    Index("ix_requests_key_created", "key_id", "created_ms"),
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
# Re-exported: the merge is part of this store's contract.
__all__ = ["Item", "RecordStore", "merge_stage", "summarize"]


def _summary(row: Any) -> RequestSummary:
    m = row._mapping
    return RequestSummary(**{k: m[k] for k in RequestSummary.model_fields})


def _span(row: Any) -> SpanRecord:
    m = row._mapping
    return SpanRecord(**{k: m[k] for k in SpanRecord.model_fields})


def _create_indexes(sync_conn: Any) -> None:
    for index in requests.indexes:
        index.create(sync_conn, checkfirst=True)


class RecordStore:
    def __init__(self, engine: AsyncEngine, no_raw_text_tenants: Sequence[str] = ()):
        self.engine = engine
        self.no_raw_text = frozenset(no_raw_text_tenants)

    async def init(self) -> None:
        await create_all(self.engine, metadata)
        async with self.engine.begin() as conn:
            # A logger.db from an older version lacks the newer columns.
            await conn.run_sync(add_missing_columns, requests, {"text_purged": "false"})
            # create_all makes indexes only with their table; an older table gets the newer ones here.
            await conn.run_sync(_create_indexes)

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
            if by_rid:
                await self._merge(conn, by_rid)
            if span_rows:
                await conn.execute(insert_ignore(conn, spans, ["trace_id", "span_id"]), span_rows)
            for fb in ratings:
                row = {**fb.model_dump(), "created_ms": fb.created_ms or now_ms()}
                if fb.tenant in self.no_raw_text and row["comment"]:
                    row["comment"] = "sha256:" + digest(row["comment"])["sha256"]
                await conn.execute(
                    upsert(conn, feedback, ["rid", "user", "kind"], ["value", "other_rid", "comment", "created_ms"]),
                    row,
                )

    async def _merge(self, conn: AsyncConnection, by_rid: dict[str, list[StageRecord]]) -> None:
        """Merge every request of a batch in three statements, whatever the number of requests: a
        statement costs a round trip to the driver, and a request's records arrive spread over batches."""
        now = now_ms()
        # Sorted: two logger replicas lock the rows of overlapping batches in the same order (no deadlock).
        rids = sorted(by_rid)
        # Insert-then-lock: the rows exist before FOR UPDATE, so two logger replicas merging the same
        # rid serialize on PostgreSQL instead of overwriting each other (SQLite has one writer anyway).
        await conn.execute(
            insert_ignore(conn, requests, ["rid"]),
            [{"rid": rid, "created_ms": now, "updated_ms": now, "record": {}} for rid in rids],
        )
        c = requests.c
        found = await conn.execute(
            select(c.rid, c.record, c.text_purged).where(c.rid.in_(rids)).order_by(c.rid).with_for_update()
        )
        held = {rid: (record, purged) for rid, record, purged in found}
        rows: list[dict[str, Any]] = []
        for rid in rids:
            stored, purged = held.get(rid, (None, False))
            record: dict[str, Any] = dict(stored) if stored else {}
            for stage in by_rid[rid]:
                record = merge_stage(record, stage)
            # Scrubbed before it is written: an opted-out tenant's text never reaches the disk, and a stage
            # record redelivered after the retention purge does not bring the text back.
            summary = summarize(record)
            if purged or summary["tenant"] in self.no_raw_text:
                record = scrub(record)
            rows.append({"match_rid": rid, "record": record, "updated_ms": now, **summary})
        await conn.execute(update(requests).where(c.rid == bindparam("match_rid")), rows)

    async def get(self, rid: str, tenant: str | None = None) -> tuple[RequestSummary, dict[str, Any]] | None:
        """The request `rid`; with `tenant`, only that tenant's (another tenant's is None, as a missing one)."""
        q = select(requests).where(requests.c.rid == rid)
        if tenant is not None:
            q = q.where(requests.c.tenant == tenant)
        async with self.engine.connect() as conn:
            row = (await conn.execute(q)).first()
        if row is None:
            return None
        return _summary(row), dict(row.record)

    async def trace(self, trace_id: str) -> list[SpanRecord]:
        """Every span of a trace, by start time (a waterfall's order)."""
        q = select(spans).where(spans.c.trace_id == trace_id).order_by(spans.c.start_ns, spans.c.span_id)
        async with self.engine.connect() as conn:
            return [_span(r) for r in (await conn.execute(q)).all()]

    def _filtered(self, q: RequestListQuery) -> Any:
        c = requests.c
        sel = select(requests)
        filters = (
            (c.tenant, q.tenant),
            (c.status, q.status),
            (c.model, q.model),
            (c.api, q.api),
            (c.mode, q.mode),
            (c.safety_action, q.safety_action),
            (c.replay_of, q.replay_of),
        )
        for col, value in filters:
            if value:
                sel = sel.where(col == value)
        if q.replays is True:
            sel = sel.where(c.replay_of.is_not(None))
        elif q.replays is False:
            sel = sel.where(c.replay_of.is_(None))
        if q.since_ms is not None:
            sel = sel.where(c.created_ms >= q.since_ms)
        if q.until_ms is not None:
            sel = sel.where(c.created_ms < q.until_ms)
        after = decode_cursor(q.cursor, 2)
        if after is not None:
            sel = sel.where(or_(c.created_ms < after[0], and_(c.created_ms == after[0], c.rid < after[1])))
        return sel.order_by(c.created_ms.desc(), c.rid.desc()).limit(q.limit + 1)

    async def list_requests(self, q: RequestListQuery) -> tuple[list[RequestSummary], str | None]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(self._filtered(q))).all()
        items = [_summary(r) for r in rows[: q.limit]]
        nxt = encode_cursor(items[-1].created_ms, items[-1].rid) if len(rows) > q.limit else None
        return items, nxt

    async def export(self, q: RequestListQuery) -> tuple[list[dict[str, Any]], str | None]:
        """A page of dataset rows, newest first, with each request's feedback."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(self._filtered(q))).all()
        page = rows[: q.limit]
        ratings: dict[str, list[dict[str, Any]]] = {}
        if page:
            rids = [r.rid for r in page]
            async with self.engine.connect() as conn:
                for f in (await conn.execute(select(feedback).where(feedback.c.rid.in_(rids)))).all():
                    m = f._mapping
                    ratings.setdefault(m["rid"], []).append(
                        {"kind": m["kind"], "value": m["value"], "other_rid": m["other_rid"], "comment": m["comment"]}
                    )
        items = []
        for r in page:
            record = RequestRecord.model_validate(dict(r.record))
            items.append(dataset_row(_summary(r), record, ratings.get(r.rid, [])))
        nxt = encode_cursor(page[-1].created_ms, page[-1].rid) if len(rows) > q.limit else None
        return items, nxt

    async def stats(self, q: StatsQuery) -> Stats:
        until = q.until_ms or now_ms()
        since = until - q.window_s * 1000
        bucket_s = pick_bucket_s(q.window_s, q.bucket_s)
        c = requests.c
        sel = select(
            c.created_ms,
            c.status,
            c.safety_action,
            c.ttft_ms,
            c.tpot_ms,
            c.prompt_tokens,
            c.cached_tokens,
            c.completion_tokens,
        ).where(c.created_ms >= since, c.created_ms < until)
        if q.tenant:
            sel = sel.where(c.tenant == q.tenant)
        if not q.include_replays:
            sel = sel.where(c.replay_of.is_(None))
        async with self.engine.connect() as conn:
            rows = [Row(*r) for r in (await conn.execute(sel)).all()]
        total, buckets = aggregate(rows, since, until, bucket_s)
        return Stats(
            since_ms=since,
            until_ms=until,
            window_s=q.window_s,
            bucket_s=bucket_s,
            total=total,
            buckets=buckets,
            requests_per_minute=total.requests / (q.window_s / 60),
        )

    async def key_usage(self, q: KeyUsageQuery) -> KeyUsage:
        """One key's requests and tokens in [since, until), by model and by UTC day (replays excluded:
        they carry the operator's key, not this one)."""
        c = requests.c
        sel = select(c.created_ms, c.model, c.prompt_tokens, c.completion_tokens).where(
            c.key_id == q.key_id, c.created_ms >= q.since_ms, c.created_ms < q.until_ms
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sel)).all()
        return key_usage(q, [tuple(r) for r in rows])

    async def purge_text(self, before_ms: int, batch: int = 500) -> int:
        """Scrub the raw text of records created before `before_ms` (retention); returns how many."""
        c = requests.c
        done = 0
        while True:
            async with self.engine.begin() as conn:
                rows = (
                    await conn.execute(
                        select(c.rid, c.record).where(c.created_ms < before_ms, c.text_purged.is_(False)).limit(batch)
                    )
                ).all()
                for rid, record in rows:
                    await conn.execute(
                        update(requests).where(c.rid == rid).values(record=scrub(dict(record)), text_purged=True)
                    )
            done += len(rows)
            if len(rows) < batch:
                return done

    async def delete_before(self, before_ms: int) -> int:
        """Drop whole records (and their spans and feedback) created before `before_ms`."""
        c = requests.c
        async with self.engine.begin() as conn:
            old = select(c.rid).where(c.created_ms < before_ms)
            traces = select(c.trace_id).where(c.created_ms < before_ms, c.trace_id != "")
            await conn.execute(delete(spans).where(spans.c.trace_id.in_(traces)))
            await conn.execute(delete(feedback).where(feedback.c.rid.in_(old)))
            res = await conn.execute(delete(requests).where(c.created_ms < before_ms))
        return int(res.rowcount or 0)

    async def feedback(
        self, tenant: str | None = None, rid: str | None = None, limit: int = 100, kind: str | None = None
    ) -> list[Feedback]:
        f = feedback.c
        sel = select(feedback)
        if tenant:
            sel = sel.where(f.tenant == tenant)
        if rid:
            sel = sel.where(or_(f.rid == rid, f.other_rid == rid))
        if kind:
            sel = sel.where(f.kind == kind)
        sel = sel.order_by(f.created_ms.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sel)).all()
        return [Feedback(**{k: r._mapping[k] for k in Feedback.model_fields}) for r in rows]

    async def preferences(self, q: PreferenceQuery) -> tuple[list[PreferencePair], str | None]:
        """Preference feedback joined with both answers and the prompt the chosen one saw."""
        f = feedback.c
        sel = select(feedback).where(f.kind == "preference", f.other_rid.is_not(None))
        if q.tenant:
            sel = sel.where(f.tenant == q.tenant)
        after = decode_cursor(q.cursor, 3)
        if after is not None:
            sel = sel.where(
                or_(
                    f.created_ms < after[0],
                    and_(f.created_ms == after[0], or_(f.rid < after[1], and_(f.rid == after[1], f.user < after[2]))),
                )
            )
        sel = sel.order_by(f.created_ms.desc(), f.rid.desc(), f.user.desc()).limit(q.limit + 1)
        async with self.engine.connect() as conn:
            prefs = (await conn.execute(sel)).all()
            page = prefs[: q.limit]
            rids = {p.rid for p in page} | {p.other_rid for p in page}
            got = await conn.execute(select(requests.c.rid, requests.c.record).where(requests.c.rid.in_(rids)))
            recs = {r.rid: RequestRecord.model_validate(dict(r.record)) for r in got}
        items = []
        for p in page:
            chosen, rejected = recs.get(p.rid, RequestRecord()), recs.get(p.other_rid, RequestRecord())
            text = chosen.request.text if chosen.request else None
            items.append(
                PreferencePair(
                    tenant=p.tenant,
                    user=p.user,
                    chosen_rid=p.rid,
                    rejected_rid=p.other_rid,
                    prompt=chosen.prompt if isinstance(chosen.prompt, str) else "",
                    text=text if isinstance(text, str) else "",
                    chosen=answer_text(chosen),
                    rejected=answer_text(rejected),
                    created_ms=p.created_ms,
                )
            )
        nxt = None
        if len(prefs) > q.limit:
            last = page[-1]
            nxt = encode_cursor(last.created_ms, last.rid, last.user)
        return items, nxt
