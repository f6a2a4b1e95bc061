"""Resuming a stream that another gateway replica relays (the relaying replica's own copy is its `Run`, run.py).

A memory-backed JetStream stream captures `chat.events.>` for a few minutes, so any replica can replay a
request's events in order and follow the rest live. Sequence numbers are positions among the rid's
messages on `chat.events.<rid>.*`: `.direct` (every stage's own events, which the relaying replica hears
on the rid's subscription) and `.kept` (safety_out's copy of the text and end it sent the relaying replica
in its `chat.steps` pass messages), the same ids the relaying replica gave them: it numbers events in the
order they reach it, and safety_out sends each stream's text and end to both in the same order. The
relaying replica's own copy stays the fast path; this is the fallback.

Where a reader resumes is checked before anything is sent: `Last-Event-ID` (or `?after=`) is the id of an
event the client received, an integer from -1 (from the start); one past the stream's last event is a 400,
never a replay of the tail or a second `done`.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import AsyncGenerator

from switchyard.libs.bus import Bus
from switchyard.libs.bus import headers as H
from switchyard.libs.bus.capture import ensure_memory_stream, follow, last_headers
from switchyard.schemas import ChatEvent, ErrorCode, ErrorInfo, subjects
from switchyard.schemas.frames import decode_kept
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.runs.run import TERMINAL

# Far more events than any stream carries; a larger id cannot be one the client was sent.
MAX_EVENT_ID = (1 << 31) - 1
_EVENT_ID = re.compile(r"-?[0-9]{1,10}")


def resume_position(last_event_id: str | None, after: str | None) -> int:
    """The id a reader resumes after: the `Last-Event-ID` header, else `?after=`, else -1 (from the start)."""
    name, raw = ("Last-Event-ID", last_event_id) if last_event_id is not None else ("after", after)
    if raw is None or not raw.strip():
        return -1  # EventSource sends no header before its first event; an empty one means the same
    raw = raw.strip()
    if not _EVENT_ID.fullmatch(raw) or not -1 <= int(raw) <= MAX_EVENT_ID:
        raise ApiError(
            ErrorCode.bad_request,
            f"{name} must be the id of an event received: an integer from -1 (from the start) to {MAX_EVENT_ID}, "
            f"not {raw[:32]!r}",
        )
    return int(raw)


class PastTheEnd(ApiError):
    """The client named an event the stream never had."""

    def __init__(self, after: int, last: int, *, finished: bool = True):
        so_far = "" if finished else " so far"
        super().__init__(
            ErrorCode.bad_request,
            f"Last-Event-ID (or after) {after} is past the stream's end: its last event{so_far} is {last}",
        )


async def ensure_events_stream(bus: Bus, max_age_s: float, max_bytes: int) -> None:
    await ensure_memory_stream(
        bus, subjects.CHAT_EVENTS_STREAM, [subjects.CHAT_EVENTS_ALL, subjects.CHAT_OWNER_ALL], max_age_s, max_bytes
    )


async def mark_owner(bus: Bus, rid: str, tenant: str) -> None:
    """Published by the relaying replica at launch; JetStream keeps it beside the events."""
    await bus.publish_marker(subjects.chat_owner(rid), {H.TENANT: tenant, H.RID: rid})


async def stream_tenant(bus: Bus, rid: str) -> str | None:
    """The tenant a kept stream belongs to, or None when none is kept."""
    headers = await last_headers(bus, subjects.CHAT_EVENTS_STREAM, subjects.chat_owner(rid))
    return (headers or {}).get(H.TENANT) or None


async def owned(bus: Bus, rid: str, tenant: str) -> None:
    # Another tenant's stream, one without a tenant, and none at all look the same: 404.
    if await stream_tenant(bus, rid) != tenant:
        raise ApiError(ErrorCode.not_found, f"stream {rid!r} not found")


async def kept_events(
    bus: Bus, rid: str, after: int, idle_s: float, timeout_s: float
) -> AsyncGenerator[tuple[int, ChatEvent] | None, None]:
    """Events after `after`, then live ones until the terminal event; None after `idle_s` of quiet. `PastTheEnd`
    when the stream ends before `after`."""
    deadline = time.monotonic() + timeout_s
    seq = -1
    events = follow(
        bus, subjects.CHAT_EVENTS_STREAM, subjects.chat_events_of(rid), functools.partial(decode_kept, rid), idle_s
    )
    try:
        async for kept in events:
            if kept is None:
                if time.monotonic() > deadline:
                    info = ErrorInfo.of(ErrorCode.deadline_exceeded, "stream did not finish in time")
                    yield seq + 1, ChatEvent(rid=rid, type="error", error=info)
                    return
                yield None
                continue
            for event in kept:  # a message of safety_out's kept copy is a stream's text of a short interval
                if event.type in ("holder", "prompt"):
                    continue  # for the gateway that launched the run, never relayed or numbered
                seq += 1
                if seq > after:
                    yield seq, event
                if event.type in TERMINAL:
                    if seq < after:
                        raise PastTheEnd(after, seq)
                    return
    finally:
        await events.aclose()
