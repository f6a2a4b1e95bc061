"""The relay writes every event that is ready in one socket write, and loses or reorders none."""

import asyncio
from collections.abc import AsyncIterator

from opentelemetry import trace

from switchyard.schemas import ChatEvent
from switchyard.services.gateway.runs.relay import Batch, Encoder, encoded, sse
from switchyard.services.gateway.runs.run import Phase, Run


class Plain(Encoder):
    def opening(self) -> list:
        return [sse({"open": True})]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list:
        return [sse({"i": index, "text": event.text}, id=seq)]

    def closing(self) -> list:
        return [sse("[DONE]")]


def delta(text: str) -> ChatEvent:
    return ChatEvent(rid="r", type="delta", text=text)


async def test_events_ready_together_are_one_batch_and_later_ones_follow_live():
    run = Run(rid="r", api="chat", route="/chat", tenant="t", key_id="k", span=trace.INVALID_SPAN)
    for t in ("a", "b", "c"):
        run.push(delta(t))
    batches = run.follow_batches()
    assert [e.text for _, e in await anext(batches)] == ["a", "b", "c"]
    later = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0)
    assert not later.done()  # nothing new: the reader waits
    run.push(delta("d"))
    run.push(delta("e"))
    assert [(s, e.text) for s, e in await later] == [(3, "d"), (4, "e")]


async def test_the_last_event_ends_the_batches():
    run = Run(rid="r", api="chat", route="/chat", tenant="t", key_id="k", span=trace.INVALID_SPAN)
    run.push(delta("a"))
    for phase in (Phase.running, Phase.ending):
        run.to(phase)
    run.push(ChatEvent(rid="r", type="done", finish_reason="stop"))
    run.to(Phase.ended)
    got = [[e.type for _, e in b] async for b in run.follow_batches()]
    assert got == [["delta", "done"]]


async def test_following_from_a_position_skips_what_was_seen():
    run = Run(rid="r", api="chat", route="/chat", tenant="t", key_id="k", span=trace.INVALID_SPAN)
    for t in ("a", "b", "c"):
        run.push(delta(t))
    first = await anext(run.follow_batches(after=1))
    assert [(s, e.text) for s, e in first] == [(2, "c")]


async def test_a_batch_is_one_write_carrying_each_event_in_order():
    async def batches() -> AsyncIterator[Batch]:
        yield [(0, 0, delta("a")), (0, 1, delta("b")), (0, 2, delta("c"))]
        yield [(0, 3, delta("d"))]

    chunks = [c async for c in encoded(batches(), Plain())]
    assert len(chunks) == 4  # opening, two batches, closing
    per_event = b"".join(e.encode() for e in [sse({"i": 0, "text": t}, id=i) for i, t in enumerate("abc")])
    assert chunks[1] == per_event
    assert chunks[0].startswith(b"data: {") and chunks[-1] == b"data: [DONE]\n\n"
