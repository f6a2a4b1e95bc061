"""Hop 2 per pass: safety_out sends the gateway replica a request names (`Work.relay`) one `chat.steps`
message per pass for all of its streams, and keeps a copy on `chat.events.<rid>.kept`, so resuming on any
replica replays the same events with the same ids, even past a relaying replica that stopped listening.
Real nats-server (with JetStream), real safety_out and safety_in; this test plays inference, context's
save and the relaying gateway."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import (
    ChatEvent,
    RawChunk,
    SaveTurn,
    SaveTurnAck,
    StreamOpen,
    StreamOpenAck,
    ToolEvent,
    Usage,
    Work,
    subjects,
)
from switchyard.schemas.frames import (
    ChatFrame,
    chat_frame_event,
    decode_chat_step,
    decode_event,
    decode_kept,
    encode_step_frame,
    join_step,
)
from switchyard.services.gateway.runs.resume import ensure_events_stream, kept_events
from tests.services.safety_out.checkers import checking_stages
from tests.wait import wait_for

GATEWAY = "gw-a"


@dataclass
class Relay:
    """The relaying gateway's view: every `chat.steps` message as it came, and each rid's events numbered
    as the gateway numbers them (in the order they reach it, holder and prompt events left out)."""

    messages: list[list[ChatFrame] | ChatEvent] = field(default_factory=list)
    events: dict[str, list[ChatEvent]] = field(default_factory=dict)
    direct_text: list[ChatEvent] = field(default_factory=list)  # text that came on chat.events.<rid>.direct
    steps_sub: Any = None

    def take(self, event: ChatEvent) -> None:
        if event.type not in ("holder", "prompt"):
            self.events.setdefault(event.rid, []).append(event)

    async def on_step(self, step: list[ChatFrame] | ChatEvent) -> None:
        self.messages.append(step)
        for item in step if isinstance(step, list) else [step]:
            self.take(chat_frame_event(item) if isinstance(item, ChatFrame) else item)

    async def on_direct(self, event: ChatEvent) -> None:
        if event.type in ("delta", "thinking"):
            self.direct_text.append(event)
        self.take(event)

    def text(self, rid: str) -> str:
        return "".join(e.text for e in self.events.get(rid, []) if e.type == "delta")

    def ended(self, rid: str) -> bool:
        return any(e.type in ("done", "error") for e in self.events.get(rid, []))


@dataclass
class Stack:
    peer: Bus  # inference, and context's save
    gateway: Bus
    relay: Relay
    checker: str = ""

    async def open(self) -> str:
        rid = uuid.uuid4().hex
        await self.gateway.watch_frames(
            subjects.chat_events(rid), functools.partial(decode_event, rid), self.relay.on_direct
        )
        await self.gateway.flush()
        work = Work(rid=rid, tenant="t", user="u", key_id="k", chat_id="c-" + rid, text="q", relay=GATEWAY)
        ack = await self.peer.request(subjects.SAFETY_OUT, StreamOpen(work=work), StreamOpenAck)
        self.checker = subjects.stream_steps(ack.replica, self.peer.replica)
        return rid

    async def step(self, texts: dict[str, str], seq: int) -> None:
        """One engine step: one message with a frame for each stream."""
        frames = [encode_step_frame(rid, seq, "delta", text) for rid, text in texts.items()]
        await self.peer.publish_frame(self.checker, join_step(frames))

    async def end(self, rid: str, seq: int) -> None:
        usage = Usage(prompt_tokens=3, completion_tokens=9)
        await self.peer.publish(
            self.checker, RawChunk(rid=rid, seq=seq, finished=True, finish_reason="stop", usage=usage)
        )


@pytest.fixture(scope="module")
async def stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    async with checking_stages(nats_server):
        peer = await Bus.connect(nats_server.url, "inference", "i1", setup_tracing("inference"))

        async def save(req: SaveTurn) -> SaveTurnAck:
            return SaveTurnAck(turn_id=req.turn.id)

        await peer.subscribe(subjects.SAVE_TURN, SaveTurn, save, queue="context")
        gateway = await Bus.connect(nats_server.url, "gateway", GATEWAY, setup_tracing("gateway"))
        await ensure_events_stream(gateway, 120, 64 << 20)
        relay = Relay()
        relay.steps_sub = await gateway.watch_frames(subjects.chat_steps_to(GATEWAY), decode_chat_step, relay.on_step)
        await gateway.flush()
        await peer.flush()
        yield Stack(peer, gateway, relay)
    await gateway.close()
    await peer.drain()


WORDS = ["Water", " the", " roses", " twice", " a", " week", " in", " summer."]


async def test_one_pass_is_one_message_for_every_stream_and_each_stream_keeps_its_order(stack: Stack) -> None:
    relay = stack.relay
    rids = [await stack.open() for _ in range(3)]
    await stack.step({rid: f"{WORDS[0]}{'xyz'[i]}" for i, rid in enumerate(rids)}, 0)
    await stack.step({rid: WORDS[1] for rid in rids}, 1)
    # Shown once input safety admitted each stream (each on its own, held text in one go).
    await wait_for(lambda: all(relay.text(rid) for rid in rids), timeout=30)
    for seq, word in enumerate(WORDS[2:], 2):
        before = len(relay.messages)
        await stack.step({rid: word for rid in rids}, seq)
        # The step releases the word before in every stream: one message to the gateway carries all three.
        await wait_for(lambda n=before: len(relay.messages) > n, timeout=10)
        first = relay.messages[before]
        assert isinstance(first, list)
        assert sorted(f.rid for f in first) == sorted(rids)
    for rid in rids:
        await stack.end(rid, len(WORDS))
    await wait_for(lambda: all(relay.ended(rid) for rid in rids), timeout=30)
    for i, rid in enumerate(rids):
        events = relay.events[rid]
        assert [e.type for e in events[:-1]] == ["delta"] * (len(events) - 1)
        assert events[-1].type == "done" and events[-1].usage is not None
        assert relay.text(rid) == f"{WORDS[0]}{'xyz'[i]}" + "".join(WORDS[1:])
    assert relay.direct_text == []  # the text went to the relaying replica's one subscription only


async def resumed(bus: Bus, rid: str, after: int) -> list[tuple[int, ChatEvent]]:
    out = []
    async for item in kept_events(bus, rid, after, idle_s=0.5, timeout_s=20):
        if item is not None:
            out.append(item)
    return out


async def test_resume_replays_the_relayed_events_with_their_ids_past_a_lost_subscription(
    nats_server: NatsServer, stack: Stack
) -> None:
    relay = stack.relay
    rid = await stack.open()
    # A stage before safety_out speaks on the rid's own subject: the ids count it with the text.
    tool = ToolEvent(id="c1", name="search", status="ok", output="roses")
    await stack.peer.emit(ChatEvent(rid=rid, type="tool", tool=tool))
    for seq, word in enumerate(WORDS[:4]):
        await stack.step({rid: word}, seq)
    await wait_for(lambda: relay.text(rid) == "".join(WORDS[:3]) + " ", timeout=30)
    seen = list(relay.events[rid])
    assert seen[0].type == "tool"
    # The relaying replica stops hearing its passes (gone, or its subscription lost): the rest is kept.
    await relay.steps_sub.unsubscribe()
    try:
        for seq, word in enumerate(WORDS[4:], 4):
            await stack.step({rid: word}, seq)
        await stack.end(rid, len(WORDS))
        other = await Bus.connect(nats_server.url, "gateway", "gw-b", setup_tracing("gateway"))
        try:
            # From the start: the very events the relaying replica numbered, under the same ids.
            everything = await resumed(other, rid, -1)
            assert [i for i, _ in everything] == list(range(len(everything)))
            assert [(e.type, e.text) for _, e in everything[: len(seen)]] == [(e.type, e.text) for e in seen]
            # After the last id the relaying replica sent its client: exactly the rest, nothing twice.
            rest = await resumed(other, rid, len(seen) - 1)
            assert [i for i, _ in rest] == list(range(len(seen), len(everything)))
            answer = "".join(e.text for e in [*seen, *(e for _, e in rest)] if e.type == "delta")
            assert answer == "".join(WORDS)
            assert rest[-1][1].type == "done"
        finally:
            await other.close()
    finally:
        relay.steps_sub = await stack.gateway.watch_frames(
            subjects.chat_steps_to(GATEWAY), decode_chat_step, relay.on_step
        )
        await stack.gateway.flush()
        await asyncio.sleep(0)


async def test_the_kept_copy_coalesces_a_streams_text_and_resumes_exactly_from_inside_a_message(
    nats_server: NatsServer, stack: Stack
) -> None:
    relay = stack.relay
    rid = await stack.open()
    kept: list[bytes] = []

    async def on_kept(data: bytes) -> None:
        kept.append(data)

    sub = await stack.gateway.watch_frames(subjects.chat_events_kept(rid), bytes, on_kept)
    await stack.gateway.flush()
    for seq, word in enumerate(WORDS):
        await stack.step({rid: word}, seq)
    await stack.end(rid, len(WORDS))
    await wait_for(lambda: relay.ended(rid), timeout=30)
    relayed = relay.events[rid]
    await wait_for(lambda: len(kept) >= 2 and kept[-1][:1] == b"{", timeout=10)
    await sub.unsubscribe()
    # Fewer messages than pieces of text: a message carries several, each still its own event.
    pieces = len(relayed) - 1
    assert len(kept) - 1 < pieces and any(len(decode_kept(rid, m)) > 1 for m in kept)
    other = await Bus.connect(nats_server.url, "gateway", "gw-b", setup_tracing("gateway"))
    try:
        for after in range(-1, len(relayed) - 1):
            rest = await resumed(other, rid, after)
            assert [i for i, _ in rest] == list(range(after + 1, len(relayed)))
            assert [(e.type, e.text) for _, e in rest] == [(e.type, e.text) for e in relayed[after + 1 :]]
    finally:
        await other.close()
