"""The step and per-token frames: what each subject carries, decoded and validated once."""

from __future__ import annotations

import pytest

from switchyard.schemas import ChatEvent, RawChunk, TokenLogprob, Usage
from switchyard.schemas.frames import (
    FrameError,
    StepFrame,
    decode_event,
    decode_kept,
    decode_step,
    encode_step_frame,
    encode_text,
    join_step,
    text_event,
)


def test_a_step_carries_every_streams_frame_and_the_end_is_a_chunk() -> None:
    step = join_step(
        [encode_step_frame("r1", 3, "thinking", 'a "quoted" é\n', 2), encode_step_frame("r2", 0, "delta", "Hi")]
    )
    assert decode_step(step) == [StepFrame("r1", 3, "thinking", 'a "quoted" é\n', 2), StepFrame("r2", 0, "delta", "Hi")]
    end = RawChunk(rid="r", seq=4, finished=True, finish_reason="length", usage=Usage(completion_tokens=9))
    got = decode_step(end.model_dump_json().encode())
    assert isinstance(got, RawChunk) and got.finished and got.usage == end.usage


def test_text_frames_become_chat_events_and_other_events_stay_whole() -> None:
    event = decode_event("r1", encode_text("delta", "Hello"))
    assert (event.rid, event.type, event.text) == ("r1", "delta", "Hello")
    assert event.model_dump()["usage"] is None  # a full event, defaults and all
    done = ChatEvent(rid="r1", type="done", finish_reason="stop", usage=Usage(completion_tokens=2))
    assert decode_event("r1", done.model_dump_json().encode()) == done


@pytest.mark.parametrize(
    "data",
    [b"[1, 2]", b'["tool", "x"]', b'[0, "delta", 5, 1]', b"[", b"{}", b"", b'{"rid": "r", "type": "nope"}'],
)
def test_what_is_no_frame_is_refused(data: bytes) -> None:
    with pytest.raises(FrameError):
        decode_event("r1", data)
    with pytest.raises(FrameError):
        decode_step(data)


def test_frames_carry_their_tokens_logprobs_when_asked_and_stay_short_when_not() -> None:
    entries = [TokenLogprob(token="Hel", logprob=-0.25, bytes=[72, 101, 108]).model_dump()]
    assert encode_step_frame("r1", 3, "delta", "Hel", 1) == b'["r1",3,"delta","Hel",1]'
    step = join_step([encode_step_frame("r1", 3, "delta", "Hel", 1, entries)])
    assert decode_step(step) == [StepFrame("r1", 3, "delta", "Hel", 1, entries)]
    assert encode_text("delta", "Hel") == b'["delta","Hel"]'
    event = decode_event("r1", encode_text("delta", "Hel", entries))
    assert event.logprobs == [TokenLogprob(token="Hel", logprob=-0.25, bytes=[72, 101, 108])]
    assert decode_event("r1", encode_text("delta", "Hel")).logprobs is None
    with pytest.raises(FrameError):  # entries are validated before they reach a client
        decode_event("r1", b'["delta", "Hel", [{"token": 5}]]')


def test_a_text_event_is_the_object_model_construct_makes() -> None:
    made = text_event("r1", "thinking", 'a "quoted" é\n')
    expected = ChatEvent.model_construct(rid="r1", type="thinking", text='a "quoted" é\n')
    assert made == expected
    assert list(made.__dict__.items()) == list(expected.__dict__.items())
    assert made.model_fields_set == expected.model_fields_set
    assert made.model_dump_json() == expected.model_dump_json()
    made.model_fields_set.add("usage")  # each event owns its set: no other event sees the change
    assert text_event("r2", "delta", "x").model_fields_set == {"rid", "type", "text"}


def test_a_kept_message_is_one_event_per_frame_and_any_other_message_one_event() -> None:
    entries = [TokenLogprob(token="b", logprob=-0.5, bytes=[98]).model_dump()]
    coalesced = join_step(
        [encode_text("thinking", "a"), encode_text("delta", "b", entries), encode_text("delta", "[c")]
    )
    events = decode_kept("r1", coalesced)
    assert [(e.rid, e.type, e.text) for e in events] == [
        ("r1", "thinking", "a"),
        ("r1", "delta", "b"),
        ("r1", "delta", "[c"),
    ]
    assert events[1].logprobs == [TokenLogprob(token="b", logprob=-0.5, bytes=[98])]
    assert [e.text for e in decode_kept("r1", encode_text("delta", "one"))] == ["one"]  # a message per release
    done = ChatEvent(rid="r1", type="done", finish_reason="stop")
    assert decode_kept("r1", done.model_dump_json().encode()) == [done]
    with pytest.raises(FrameError):
        decode_kept("r1", b'[["tool", "x"]]')
