"""Logger handlers: the console's queries over request records; the consumer lives in `consume.py`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from libs.bus import Bus, BusError
from libs.store.db import make_engine
from libs.store.records import RecordStore
from schemas import (
    ErrorCode,
    FeedbackList,
    FeedbackQuery,
    RequestList,
    RequestListQuery,
    RequestQuery,
    RequestRecordReply,
    subjects,
)
from schemas.records import ADMIN_FEEDBACK_LIST, ADMIN_REQUESTS_LIST
from services.logger.consume import LogConsumer
from services.logger.settings import LoggerSettings


class Admin:
    def __init__(self, store: RecordStore):
        self.store = store

    async def get(self, q: RequestQuery) -> RequestRecordReply:
        got = await self.store.get(q.rid)
        if got is None:
            raise BusError(ErrorCode.not_found, f"request {q.rid} not found")
        summary, record = got
        record = {**record, **summary.model_dump()}
        feedback = await self.store.feedback(rid=q.rid)
        if feedback:
            record["feedback"] = [f.model_dump() for f in feedback]
        spans = await self.store.trace(summary.trace_id) if summary.trace_id else []
        return RequestRecordReply(rid=q.rid, record=record, spans=spans)

    async def list_requests(self, q: RequestListQuery) -> RequestList:
        items, nxt = await self.store.list_requests(q)
        return RequestList(items=items, next_cursor=nxt)

    async def feedback(self, q: FeedbackQuery) -> FeedbackList:
        return FeedbackList(items=await self.store.feedback(q.tenant, q.rid, q.limit))


async def setup(bus: Bus, settings: LoggerSettings) -> Callable[[], Awaitable[None]]:
    engine = make_engine(settings.db_url())
    store = RecordStore(engine)
    await store.init()
    consumer = LogConsumer(bus, store, settings)
    await consumer.start()
    admin = Admin(store)
    # No spans for console queries: a console polling every second would bury the request traces.
    await bus.subscribe(subjects.ADMIN_REQUEST_GET, RequestQuery, admin.get, queue="logger", span=False)
    await bus.subscribe(ADMIN_REQUESTS_LIST, RequestListQuery, admin.list_requests, queue="logger", span=False)
    await bus.subscribe(ADMIN_FEEDBACK_LIST, FeedbackQuery, admin.feedback, queue="logger", span=False)

    async def cleanup() -> None:
        await consumer.stop()
        await engine.dispose()

    return cleanup
