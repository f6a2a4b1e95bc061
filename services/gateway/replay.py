"""Resuming a stream that another gateway replica relays.

A memory-backed JetStream stream captures `chat.events.>` for a few minutes, so any replica can replay a
request's events in order and follow the rest live. Sequence numbers are positions among the rid's
messages, the same ids the relaying replica gave them (it numbers events in the order the server
delivered them). The relaying replica's own copy stays the fast path; this is the fallback.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from pydantic import ValidationError

from libs.bus import headers as H
from schemas import ChatEvent, ErrorCode, ErrorInfo, subjects
from services.gateway.errors import ApiError
from services.gateway.streams import TERMINAL

EVENTS_STREAM = "CHAT_EVENTS"


def owner_subject(rid: str) -> str:
    # Not `chat.events.<rid>`: that subject carries ChatEvents only. The owner marker says whose stream it is.
    return f"chat.owner.{rid}"


async def ensure_events_stream(js: JetStreamContext, max_age_s: float, max_bytes: int) -> None:
    cfg = StreamConfig(
        name=EVENTS_STREAM,
        subjects=["chat.events.>", "chat.owner.>"],
        storage=StorageType.MEMORY,
        max_age=max_age_s,
        max_bytes=max_bytes,
        discard=DiscardPolicy.OLD,
    )
    try:
        await js.add_stream(cfg)
    except nats.js.errors.BadRequestError:
        await js.update_stream(cfg)


async def mark_owner(nc: NATS, rid: str, tenant: str) -> None:
    """Published by the relaying replica at launch; JetStream keeps it beside the events."""
    await nc.publish(owner_subject(rid), b"", headers={H.TENANT: tenant, H.RID: rid})


async def stream_tenant(js: JetStreamContext, rid: str) -> str | None:
    """The tenant a kept stream belongs to, or None when none is kept."""
    try:
        msg = await js.get_last_msg(EVENTS_STREAM, owner_subject(rid))
    except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        return None
    return (msg.headers or {}).get(H.TENANT) or None


async def owned(js: JetStreamContext, rid: str, tenant: str) -> None:
    # Another tenant's stream, one without a tenant, and none at all look the same: 404.
    if await stream_tenant(js, rid) != tenant:
        raise ApiError(ErrorCode.not_found, f"stream {rid!r} not found")


async def replay(
    js: JetStreamContext, rid: str, after: int, idle_s: float, timeout_s: float
) -> AsyncIterator[tuple[int, ChatEvent] | None]:
    """Events after `after`, then live ones until the terminal event; None after `idle_s` of quiet."""
    sub = await js.subscribe(subjects.chat_events(rid), stream=EVENTS_STREAM, ordered_consumer=True)
    deadline = time.monotonic() + timeout_s
    seq = -1
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=idle_s)
            except nats.errors.TimeoutError:
                if time.monotonic() > deadline:
                    info = ErrorInfo.of(ErrorCode.deadline_exceeded, "stream did not finish in time")
                    yield seq + 1, ChatEvent(rid=rid, type="error", error=info)
                    return
                yield None
                continue
            try:
                event = ChatEvent.model_validate_json(msg.data)
            except ValidationError:
                continue
            seq += 1
            if seq > after:
                yield seq, event
            if event.type in TERMINAL:
                return
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
