"""Logger handlers: the console's queries over request records, and the retention purge; the consumer
lives in `consume.py`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

import structlog

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.store.db import make_engine
from switchyard.libs.store.records import RecordStore
from switchyard.libs.store.sql import encode_cursor, now_ms
from switchyard.schemas import (
    ErrorCode,
    FeedbackList,
    FeedbackQuery,
    PreferenceList,
    PreferenceQuery,
    RequestExport,
    RequestList,
    RequestListQuery,
    RequestQuery,
    RequestRecordReply,
    Stats,
    StatsQuery,
    subjects,
)
from switchyard.schemas.keys import KeyUsage, KeyUsageQuery
from switchyard.schemas.subjects import (
    ADMIN_FEEDBACK_LIST,
    ADMIN_KEY_USAGE,
    ADMIN_PREFERENCES_EXPORT,
    ADMIN_REQUESTS_EXPORT,
    ADMIN_REQUESTS_LIST,
    ADMIN_STATS,
)
from switchyard.services.logger.abuse import start_abuse_monitor
from switchyard.services.logger.consume import LogConsumer
from switchyard.services.logger.settings import LoggerSettings

log = structlog.get_logger()
DAY_MS = 24 * 3600 * 1000
EXPORT_PAGE_BYTES = 512 * 1024


class Admin:
    def __init__(self, store: RecordStore):
        self.store = store

    async def get(self, q: RequestQuery) -> RequestRecordReply:
        got = await self.store.get(q.rid, tenant=q.tenant)
        if got is None:
            raise BusError(ErrorCode.not_found, f"request {q.rid} not found")
        summary, record = got
        record = {**record, **summary.model_dump()}
        feedback = await self.store.feedback(rid=q.rid)
        if feedback:
            record["feedback"] = [f.model_dump() for f in feedback]
        replays, _ = await self.store.list_requests(RequestListQuery(replay_of=q.rid, limit=50))
        if replays:
            record["replays"] = [r.model_dump() for r in replays]
        spans = await self.store.trace(summary.trace_id) if summary.trace_id else []
        return RequestRecordReply(rid=q.rid, record=record, spans=spans)

    async def list_requests(self, q: RequestListQuery) -> RequestList:
        items, nxt = await self.store.list_requests(q)
        return RequestList(items=items, next_cursor=nxt)

    async def export(self, q: RequestListQuery) -> RequestExport:
        # Full records carry prompts and a NATS message has a size limit (1 MiB by default): a page ends
        # early, with a cursor at its last row, once it holds about half of that.
        q = q.model_copy(update={"limit": min(q.limit, 50)})
        items, nxt = await self.store.export(q)
        size = 0
        for i, item in enumerate(items):
            size += len(json.dumps(item, default=str))
            if size > EXPORT_PAGE_BYTES and i > 0:
                last = items[i - 1]
                return RequestExport(items=items[:i], next_cursor=encode_cursor(last["created_ms"], last["rid"]))
        return RequestExport(items=items, next_cursor=nxt)

    async def key_usage(self, q: KeyUsageQuery) -> KeyUsage:
        return await self.store.key_usage(q)

    async def stats(self, q: StatsQuery) -> Stats:
        return await self.store.stats(q)

    async def feedback(self, q: FeedbackQuery) -> FeedbackList:
        return FeedbackList(items=await self.store.feedback(q.tenant, q.rid, q.limit, q.kind))

    async def preferences(self, q: PreferenceQuery) -> PreferenceList:
        q = q.model_copy(update={"limit": min(q.limit, 100)})
        items, nxt = await self.store.preferences(q)
        size = 0
        for i, item in enumerate(items):
            size += len(item.model_dump_json())
            if size > EXPORT_PAGE_BYTES and i > 0:
                last = items[i - 1]
                cursor = encode_cursor(last.created_ms, last.chosen_rid, last.user)
                return PreferenceList(items=items[:i], next_cursor=cursor)
        return PreferenceList(items=items, next_cursor=nxt)


async def purge_once(store: RecordStore, settings: LoggerSettings) -> tuple[int, int]:
    """(records scrubbed, records deleted) by the retention settings."""
    scrubbed = deleted = 0
    if settings.retention_days is not None:
        scrubbed = await store.purge_text(now_ms() - int(settings.retention_days * DAY_MS))
    if settings.record_retention_days is not None:
        deleted = await store.delete_before(now_ms() - int(settings.record_retention_days * DAY_MS))
    return scrubbed, deleted


async def purge_forever(store: RecordStore, settings: LoggerSettings) -> None:
    while True:
        try:
            scrubbed, deleted = await purge_once(store, settings)
            if scrubbed or deleted:
                log.info("retention purge", scrubbed=scrubbed, deleted=deleted)
        except Exception:
            log.exception("retention purge failed")
        await asyncio.sleep(settings.purge_interval_s)


async def setup(bus: Bus, settings: LoggerSettings) -> Callable[[], Awaitable[None]]:
    engine = make_engine(settings.db_url())
    store = RecordStore(engine, settings.no_raw_text_tenants)
    await store.init()
    consumer = LogConsumer(bus, store, settings)
    await consumer.start()
    # Its own durable consumer on the same stream: counting blocks never waits on the record writer.
    abuse = await start_abuse_monitor(bus, settings)
    admin = Admin(store)
    purge: asyncio.Task[None] | None = None
    if settings.retention_days is not None or settings.record_retention_days is not None:
        purge = asyncio.create_task(purge_forever(store, settings), name="logger-purge")
    # No spans for console queries: a console polling every second would bury the request traces.
    for subject, model, handler in (
        (subjects.ADMIN_REQUEST_GET, RequestQuery, admin.get),
        (ADMIN_REQUESTS_LIST, RequestListQuery, admin.list_requests),
        (ADMIN_REQUESTS_EXPORT, RequestListQuery, admin.export),
        (ADMIN_STATS, StatsQuery, admin.stats),
        (ADMIN_KEY_USAGE, KeyUsageQuery, admin.key_usage),
        (ADMIN_FEEDBACK_LIST, FeedbackQuery, admin.feedback),
        (ADMIN_PREFERENCES_EXPORT, PreferenceQuery, admin.preferences),
    ):
        await bus.subscribe(subject, model, handler, queue="logger", span=False)  # type: ignore[arg-type]

    async def cleanup() -> None:
        if purge is not None:
            purge.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purge
        if abuse is not None:
            await abuse.stop()
        await consumer.stop()
        await engine.dispose()

    return cleanup
