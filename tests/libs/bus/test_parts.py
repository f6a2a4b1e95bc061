"""Messages over the server's max payload travel as parts and arrive whole (issue 28, item 6)."""

from __future__ import annotations

import asyncio
import functools
import uuid

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.parts import MAX_PARTS, Joiner, split
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import ChatEvent, TokenLogprob, TopLogprob, Usage, subjects
from switchyard.schemas.frames import decode_event


def big_done(rid: str, tokens: int = 1000, top: int = 20) -> ChatEvent:
    """A finished answer's event with log probabilities: over a megabyte, as a long answer's is."""
    lps = [
        TokenLogprob(
            token=f"tok{i}",
            logprob=-0.5,
            bytes=[116, 111, 107],
            top_logprobs=[TopLogprob(token=f"alt{j}", logprob=-1.25 - j, bytes=[97, 108, 116]) for j in range(top)],
        )
        for i in range(tokens)
    ]
    return ChatEvent(rid=rid, type="done", finish_reason="length", usage=Usage(completion_tokens=tokens), logprobs=lps)


async def test_a_message_over_the_max_payload_arrives_whole(nats_server: NatsServer) -> None:
    a = await Bus.connect(nats_server.url, "safety_out", uuid.uuid4().hex[:6], setup_tracing("safety_out"))
    b = await Bus.connect(nats_server.url, "gateway", uuid.uuid4().hex[:6], setup_tracing("gateway"))
    try:
        rid = uuid.uuid4().hex
        event = big_done(rid)
        assert len(event.model_dump_json()) > a.nc.max_payload  # what the server would refuse as one message
        got: asyncio.Queue[ChatEvent] = asyncio.Queue()
        framed: asyncio.Queue[ChatEvent] = asyncio.Queue()
        await b.watch(subjects.chat_events(rid), ChatEvent, got.put)
        await b.watch_frames(subjects.chat_events(rid), functools.partial(decode_event, rid), framed.put)
        await b.flush()
        small = ChatEvent(rid=rid, type="error")
        await a.emit(event)
        await a.emit(small)  # and what follows it is not mixed into its parts
        for q in (got, framed):
            assert await asyncio.wait_for(q.get(), 10) == event
            assert await asyncio.wait_for(q.get(), 10) == small
    finally:
        await a.close()
        await b.close()


def test_parts_join_in_order_and_a_lost_part_loses_only_its_message() -> None:
    data = bytes(range(256)) * 40
    parts = split(data, 4096 + 1000)
    assert len(parts) > 1 and b"".join(parts) == data
    joiner = Joiner()
    marks = [{"x-part": f"{i}/{len(parts)}"} for i in range(1, len(parts) + 1)]
    assert [joiner.add(p, m) for p, m in zip(parts[:-1], marks[:-1], strict=True)] == [None] * (len(parts) - 1)
    assert joiner.add(parts[-1], marks[-1]) == data
    with pytest.raises(ValueError):
        joiner.add(parts[1], marks[1])  # its first part never came
    assert joiner.add(b"whole", None) == b"whole"
    assert split(b"x" * 10, 1 << 20) == [b"x" * 10]
    with pytest.raises(ValueError):
        split(b"x" * (MAX_PARTS + 1) * 2000, 4096 + 2000)
