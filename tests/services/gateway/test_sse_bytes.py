"""The bytes a stream writes: a text delta's chunk made from its answer's template, and every frame's
direct encoding, are byte for byte what encoding the whole chunk through sse-starlette makes."""

from __future__ import annotations

from typing import Any

import pytest
from sse_starlette import EventSourceResponse, ServerSentEvent

from switchyard.schemas import ChatEvent, Usage
from switchyard.services.gateway.chat_completions.encoder import ChunkEncoder
from switchyard.services.gateway.completions.encoder import TextChunkEncoder
from switchyard.services.gateway.messages.encoder import MessageEncoder
from switchyard.services.gateway.runs.relay import Frame, SseResponse, sse
from switchyard.services.gateway.simple_chat.encoder import ChatEncoder

TEXTS = [
    "Hi",
    "",
    ' "quoted" \\ back',
    "line\nbreak\r\ttab",
    "\x00\x1f\x7f",
    "\u2028\u2029\x85",
    "é 漢字 🦜",
    "</script>",
]


def stream(texts: list[str]) -> list[ChatEvent]:
    events = [ChatEvent(rid="r", type="thinking", text="hmm")]
    events += [ChatEvent(rid="r", type="delta", text=t) for t in texts]
    return [*events, ChatEvent(rid="r", type="done", finish_reason="stop", usage=Usage(completion_tokens=len(texts)))]


def sse_starlette_bytes(frames: list[ServerSentEvent]) -> bytes:
    """What sse-starlette's own encoding makes of the frames."""
    return b"".join(ServerSentEvent.encode(f) for f in frames)


class WholeChunks(ChunkEncoder):
    """Every delta's chunk built and encoded whole, as before the template."""

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta" and not self.tool_names and event.logprobs is None:
            return [self.choice({"content": event.text}, index=index)]
        return super().encode(index, seq, event)


class WholeTextChunks(TextChunkEncoder):
    """Every delta's `text_completion` chunk built and encoded whole, as before the template."""

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta":
            return [self.chunk(index, event.text)]
        return super().encode(index, seq, event)


class WholeMessageEvents(MessageEncoder):
    """Every `content_block_delta` of text built and encoded whole, as before the template."""

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta" and not self.tool_names:
            out = self.blocks.switch("text")
            data = {
                "type": "content_block_delta",
                "index": self.blocks.index,
                "delta": {"type": "text_delta", "text": event.text},
            }
            return [*out, sse(data, event="content_block_delta")]
        return super().encode(index, seq, event)


def written(encoder: Any, answers: list[list[ChatEvent]], *, direct: bool) -> bytes:
    frames = [*encoder.opening()]
    for index, events in enumerate(answers):
        for seq, event in enumerate(events):
            frames += encoder.encode(index, seq, event)
    frames += encoder.closing()
    return b"".join(f.encode() for f in frames) if direct else sse_starlette_bytes(frames)


@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("fingerprint", [None, "fp_1"])
@pytest.mark.parametrize("answers", [1, 2])
def test_a_delta_chunk_from_its_template_is_the_whole_chunks_bytes(
    usage: bool, fingerprint: str | None, answers: int
) -> None:
    runs = [stream(TEXTS), stream(TEXTS[::-1])][:answers]
    args = ("rid-1", 'model "x"', usage, answers, None, None, fingerprint)
    fast = written(ChunkEncoder(*args), runs, direct=True)
    whole = written(WholeChunks(*args), runs, direct=False)
    assert fast == whole
    # the opening, thinking, deltas and finish of each answer, then the usage chunk and [DONE]
    assert fast.count(b"\n\n") == (3 + len(TEXTS)) * answers + usage + 1


@pytest.mark.parametrize("answers", [1, 2])
def test_a_text_completion_delta_from_its_template_is_the_whole_chunks_bytes(answers: int) -> None:
    runs = [stream(TEXTS), stream(TEXTS[::-1])][:answers]
    args = ("rid-1", 'model "x"', ["say it"], answers, True, True, "fp_1")
    fast = written(TextChunkEncoder(*args), runs, direct=True)
    assert fast == written(WholeTextChunks(*args), runs, direct=False)
    assert fast.count(b'"text":"\\u0000\\u001f') == answers  # the control characters escaped, once per answer


def test_a_message_text_delta_from_its_template_is_the_whole_events_bytes() -> None:
    # thinking, then text, then thinking again and text: each text block has its own index
    events = stream(TEXTS)
    events = [*events[:-1], ChatEvent(rid="r", type="thinking", text="again"), *events[1:]]
    fast = written(MessageEncoder("r", "m", input_tokens=4), [events], direct=True)
    whole = written(WholeMessageEvents("r", "m", input_tokens=4), [events], direct=False)
    assert fast == whole
    assert b'"index":1,"delta":{"type":"text_delta"' in fast and b'"index":3,"delta":{"type":"text_delta"' in fast


@pytest.mark.parametrize("encoder", [lambda: MessageEncoder("r", "m", input_tokens=4), ChatEncoder])
def test_frames_with_ids_and_names_encode_as_sse_starlette_does(encoder: Any) -> None:
    assert written(encoder(), [stream(TEXTS)], direct=True) == written(encoder(), [stream(TEXTS)], direct=False)


def test_a_string_with_a_line_break_keeps_one_data_line_per_line() -> None:
    frame = sse("a\nb", event="e", id=3)
    assert not isinstance(frame, Frame)
    assert frame.encode() == b"id: 3\nevent: e\ndata: a\ndata: b\n\n"
    assert sse("[DONE]").encode() == b"data: [DONE]\n\n"


def test_the_response_overrides_the_send_sse_starlette_still_has() -> None:
    assert "_send_with_timeout" in vars(EventSourceResponse)
    assert SseResponse._send_with_timeout is not EventSourceResponse._send_with_timeout
