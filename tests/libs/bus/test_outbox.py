"""Coalescing over time (`IntervalOutbox`): a subject's frames of an interval as one message, in order, and
a flush that sends a subject's at once, before what must follow them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from switchyard.libs.bus.outbox import IntervalOutbox
from switchyard.schemas.frames import decode_kept, encode_text
from tests.wait import wait_for


@dataclass
class FakeBus:
    max_frame_bytes: int = 1 << 20
    sent: list[tuple[str, bytes]] = field(default_factory=list)

    async def publish_frame(self, subject: str, data: bytes) -> None:
        await asyncio.sleep(0)  # a send that yields, as a real one may
        self.sent.append((subject, data))


def texts(bus: FakeBus, subject: str) -> list[list[str]]:
    return [[e.text for e in decode_kept("r", data)] for s, data in bus.sent if s == subject]


def flat(bus: FakeBus, subject: str) -> list[str]:
    return [text for message in texts(bus, subject) for text in message]


async def test_a_subjects_frames_of_an_interval_go_as_one_message_in_order() -> None:
    bus = FakeBus()
    box = IntervalOutbox(bus, 0.05)  # type: ignore[arg-type]
    for i in range(5):
        box.add("a", encode_text("delta", f"a{i}"))
        box.add("b", encode_text("delta", f"b{i}"))
    assert bus.sent == []  # nothing before the interval
    await wait_for(lambda: len(bus.sent) == 2, timeout=5)
    assert texts(bus, "a") == [[f"a{i}" for i in range(5)]] and texts(bus, "b") == [[f"b{i}" for i in range(5)]]
    box.add("a", encode_text("delta", "later"))
    await wait_for(lambda: len(bus.sent) == 3, timeout=5)
    assert texts(bus, "a")[-1] == ["later"]


async def test_a_flush_sends_a_subjects_frames_now_and_after_any_round_already_sending() -> None:
    bus = FakeBus(max_frame_bytes=40)
    box = IntervalOutbox(bus, 60)  # type: ignore[arg-type]
    for i in range(6):
        box.add("a", encode_text("delta", f"word {i}"))
    box.add("b", encode_text("delta", "other"))
    await box.flush("a")
    assert [s for s, _ in bus.sent] == ["a"] * len(bus.sent) and len(bus.sent) > 1  # split at the size limit
    assert flat(bus, "a") == [f"word {i}" for i in range(6)]
    box.add("a", encode_text("delta", "last"))
    # A round and a flush of the same subject, begun together: the subject's frames still leave in order.
    round_ = asyncio.ensure_future(box.close())
    await box.flush("a")
    await round_
    assert flat(bus, "a")[-1] == "last" and texts(bus, "b") == [["other"]]
