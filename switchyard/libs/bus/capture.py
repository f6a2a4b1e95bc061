"""Short-lived JetStream capture of plain subjects: keep them briefly, read them back in order.

Used to resume streams on any gateway replica: the events of a running request are kept in a
memory stream, and a reader replays them from the start, then follows live ones."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from switchyard.libs.bus.bus import Bus
from switchyard.libs.bus.parts import Joiner

M = TypeVar("M")


async def ensure_memory_stream(bus: Bus, name: str, subjects: list[str], max_age_s: float, max_bytes: int) -> None:
    cfg = StreamConfig(
        name=name,
        subjects=subjects,
        storage=StorageType.MEMORY,
        max_age=max_age_s,
        max_bytes=max_bytes,
        discard=DiscardPolicy.OLD,
    )
    try:
        await bus.js.add_stream(cfg)
    except nats.js.errors.BadRequestError:
        await bus.js.update_stream(cfg)


async def last_headers(bus: Bus, stream: str, subject: str) -> dict[str, str] | None:
    """Headers of the newest kept message on `subject`, or None when none is kept."""
    try:
        msg = await bus.js.get_last_msg(stream, subject)
    except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        return None
    return dict(msg.headers or {})


async def follow(
    bus: Bus, stream: str, subject: str, decode: Callable[[bytes], M], idle_s: float
) -> AsyncGenerator[M | None, None]:
    """Every kept message of `subject` (a wildcard: of every subject it matches, in the order kept) from the
    first, then live ones; None after `idle_s` of quiet.
    Messages that do not decode are skipped. The caller decides when to stop iterating."""
    sub = await bus.js.subscribe(subject, stream=stream, ordered_consumer=True)
    joiners: dict[str, Joiner] = {}  # parts are consecutive per subject, not across a wildcard's subjects
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=idle_s)
            except nats.errors.TimeoutError:
                yield None
                continue
            try:
                data = joiners.setdefault(msg.subject, Joiner()).add(msg.data, msg.headers)
                if data is None:
                    continue
                item = decode(data)
            except ValueError:  # pydantic's ValidationError and switchyard.schemas.frames.FrameError are ValueErrors
                continue
            yield item
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
