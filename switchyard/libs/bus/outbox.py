"""One message per pass of the event loop for each subject, instead of one per stream.

A pass (an engine step, a checker's round of releases) wakes every stream it has work for in the same turn
of the event loop; each stream's handler adds its frame here and returns at once. The first addition
schedules a flush, which runs once every woken stream has had its turn: it sends each subject the frames
added for it as one message (a JSON array, switchyard/schemas/frames.py). A stream's end goes through here
too, after its last frame, so it never overtakes it. Inference sends its steps to safety_out this way
(`stream.steps`), safety_out its releases to the gateway (`chat.steps`).

`IntervalOutbox` coalesces over time instead, for a copy nobody waits on: each subject's frames of up to
`interval_s` as one message (safety_out's kept copy of each stream's text, `chat.events.<rid>.kept`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence

import structlog

from switchyard.libs.bus.bus import Bus
from switchyard.schemas import ChatEvent, RawChunk
from switchyard.schemas.frames import join_step

log = structlog.get_logger()

End = RawChunk | ChatEvent


class Outbox:
    def __init__(self, bus: Bus):
        self.bus = bus
        # Per subject, in the order they were added: encoded frames and the ends of streams.
        self._pending: dict[str, list[bytes | End]] = {}
        self._flusher: asyncio.Task[None] | None = None
        # Done once the next round of sends (what is pending now, and what is added before it starts) is out.
        self._next_round: asyncio.Future[None] | None = None

    def add(self, subject: str, frame: bytes) -> None:
        """One stream's encoded frame (`encode_step_frame`, `encode_chat_frame`)."""
        self._add(subject, frame)

    def end(self, subject: str, end: End) -> asyncio.Future[None]:
        """The stream's last message, sent after every frame added before it; the future is done once it is
        handed to the bus (or its round failed, which is logged)."""
        self._add(subject, end)
        if self._next_round is None:
            self._next_round = asyncio.get_running_loop().create_future()
        return self._next_round

    def _add(self, subject: str, item: bytes | End) -> None:
        items = self._pending.get(subject)
        if items is None:
            self._pending[subject] = items = []
        items.append(item)
        if self._flusher is None:
            # A context of its own: the message is every stream's, not the one that happened to come first.
            self._flusher = asyncio.create_task(self._flush(), context=contextvars.Context())

    async def _flush(self) -> None:
        try:
            # One more turn of the loop: a stream whose handler needed one more hop joins this pass's message.
            await asyncio.sleep(0)
            # One flusher at a time, until nothing is left: the order things were added is the order sent.
            while self._pending:
                pending, self._pending = self._pending, {}
                done, self._next_round = self._next_round, None
                try:
                    for subject, items in pending.items():
                        await self._send(subject, items)
                except Exception:
                    log.exception("step frames not sent")
                finally:
                    if done is not None:
                        done.set_result(None)
        finally:
            self._flusher = None

    async def _send(self, subject: str, items: list[bytes | End]) -> None:
        await send_frames(self.bus, subject, items)


class IntervalOutbox:
    """Frames per subject, sent as one message per subject at most `interval_s` after the first of them was
    added; `flush(subject)` sends a subject's at once (before what must follow them, a stream's end)."""

    def __init__(self, bus: Bus, interval_s: float):
        self.bus = bus
        self.interval_s = interval_s
        self._pending: dict[str, list[bytes]] = {}
        self._round: asyncio.Task[None] | None = None
        # A subject's frames leave in the order added: a round and a flush never send at the same time.
        self._sending = asyncio.Lock()

    def add(self, subject: str, frame: bytes) -> None:
        items = self._pending.get(subject)
        if items is None:
            self._pending[subject] = items = []
        items.append(frame)
        if self._round is None:
            self._round = asyncio.create_task(self._later(), context=contextvars.Context())

    async def flush(self, subject: str) -> None:
        async with self._sending:
            items = self._pending.pop(subject, None)
            if items:
                await send_frames(self.bus, subject, items)

    async def close(self) -> None:
        """Send everything pending now."""
        if self._round is not None:
            self._round.cancel()
            self._round = None
        await self._send_all()

    async def _later(self) -> None:
        try:
            await asyncio.sleep(self.interval_s)
        finally:
            self._round = None
        await self._send_all()

    async def _send_all(self) -> None:
        async with self._sending:
            pending, self._pending = self._pending, {}
            try:
                for subject, items in pending.items():
                    await send_frames(self.bus, subject, items)
            except Exception:
                log.exception("coalesced frames not sent")


async def send_frames(bus: Bus, subject: str, items: Sequence[bytes | End]) -> None:
    """Frames as few messages as the bus's size limit allows (JSON arrays, `join_step`), ends as their own."""
    limit = bus.max_frame_bytes
    batch: list[bytes] = []
    size = 2
    for item in items:
        if not isinstance(item, bytes):
            if batch:
                await bus.publish_frame(subject, join_step(batch))
                batch, size = [], 2
            await bus.publish(subject, item, rid=item.rid)  # split into parts when over the limit
            continue
        if batch and size + len(item) + 1 > limit:
            await bus.publish_frame(subject, join_step(batch))
            batch, size = [], 2
        batch.append(item)
        size += len(item) + 1
    if batch:
        await bus.publish_frame(subject, join_step(batch))
