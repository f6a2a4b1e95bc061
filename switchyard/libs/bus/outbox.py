"""One message per pass of the event loop for each subject, instead of one per stream.

A pass (an engine step, a checker's round of releases) wakes every stream it has work for in the same turn
of the event loop; each stream's handler adds its frame here and returns at once. The first addition
schedules a flush, which runs once every woken stream has had its turn: it sends each subject the frames
added for it as one message (a JSON array, switchyard/schemas/frames.py). A stream's end goes through here
too, after its last frame, so it never overtakes it. Inference sends its steps to safety_out this way
(`stream.steps`), safety_out its releases to the gateway (`chat.steps`).
"""

from __future__ import annotations

import asyncio
import contextvars

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
        limit = self.bus.max_frame_bytes
        batch: list[bytes] = []
        size = 2
        for item in items:
            if not isinstance(item, bytes):
                if batch:
                    await self.bus.publish_frame(subject, join_step(batch))
                    batch, size = [], 2
                await self.bus.publish(subject, item, rid=item.rid)  # split into parts when over the limit
                continue
            if batch and size + len(item) + 1 > limit:
                await self.bus.publish_frame(subject, join_step(batch))
                batch, size = [], 2
            batch.append(item)
            size += len(item) + 1
        if batch:
            await self.bus.publish_frame(subject, join_step(batch))
