"""The per-step and per-token frames: the hot path's compact wire form (msgspec), typed and validated once on decode.

Two hops carry an answer as it is written:

- `stream.steps.<checker>.<producer>` (inference replica `producer` → safety_out replica `checker`): one
  message per engine step, a JSON array of `StepFrame`s `[rid, seq, kind, text, tokens]`, one for every
  stream of that checker the step made text for; a stream ends with one `RawChunk` object (finished,
  with usage, error or logprobs) on the same subject, after its last frame.
- `chat.steps.<gateway>.<checker>` (safety_out replica `checker` → gateway replica `gateway`, the one
  `Work.relay` names): one message per pass of the checker, a JSON array of `ChatFrame`s `[rid, kind,
  text]`, one for every piece of text it released for that gateway's streams in the pass, in order; a
  stream's `done` or `error` is one `ChatEvent` object on the same subject, after its last frame. Each
  piece also goes, as a `TextFrame`, to `chat.events.<rid>.kept`, which only the resume capture reads:
  a stream's pieces of a short interval as one message, a JSON array of `TextFrame`s (`decode_kept`),
  and its end as its `ChatEvent`, after its last text.
- `chat.events.<rid>.direct` (any stage → gateway): every other stage's events (`tool`, `holder`, `prompt`,
  an `error`) as `ChatEvent` objects; and, for a request that names no relaying gateway, safety_out's text
  as `[kind, text]` (`TextFrame`) and its end.

Every other message is a pydantic model in JSON; a frame message is a JSON array instead, so one look at
the first byte tells them apart.

When the request asked for log probabilities, its frames on both hops carry one more element: the
`TokenLogprob` items (as JSON objects) of the tokens whose text the frame carries.

A frame carries every token its stream produced since the previous frame (at most one engine step
old), so a fast engine sends fewer, larger frames and a slow one still sends one per token; the step
message makes the bus's cost per step, not per stream. Frames have no NATS headers: the rid is in the
frame (or the subject), and the request's trace and deadline travel with the messages that open and end
the stream.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec
from pydantic import BaseModel

from switchyard.schemas.messages import ChatEvent, RawChunk, TokenLogprob

TextKind = Literal["delta", "thinking"]


class StepFrame(msgspec.Struct, array_like=True, frozen=True):
    """One stream's new text (or thinking) in a step message; `seq` counts the stream's frames from 0,
    `tokens` the tokens in it."""

    rid: str
    seq: int
    kind: TextKind
    text: str
    tokens: int = 1
    logprobs: list[dict[str, Any]] | None = None  # the frame's tokens' `TokenLogprob` items, when asked for


class ChatFrame(msgspec.Struct, array_like=True, frozen=True):
    """One stream's released text (or thinking) in a `chat.steps` message."""

    rid: str
    kind: TextKind
    text: str
    logprobs: list[dict[str, Any]] | None = None  # as `TextFrame.logprobs`


class TextFrame(msgspec.Struct, array_like=True, frozen=True):
    """A `delta` or `thinking` event on `chat.events.<rid>`."""

    kind: TextKind
    text: str
    # The text's own tokens' `TokenLogprob` items, when asked for and output safety left the text unchanged.
    logprobs: list[dict[str, Any]] | None = None


_encode = msgspec.json.Encoder().encode
_steps = msgspec.json.Decoder(list[StepFrame])
_text = msgspec.json.Decoder(TextFrame)
_texts = msgspec.json.Decoder(list[TextFrame])
_chat_steps = msgspec.json.Decoder(list[ChatFrame])
F = TypeVar("F")
E = TypeVar("E", bound=BaseModel)


class FrameError(ValueError):
    """Bytes on a frame subject that are neither a frame nor the subject's model."""


def encode_step_frame(
    rid: str, seq: int, kind: TextKind, text: str, tokens: int = 1, logprobs: list[dict[str, Any]] | None = None
) -> bytes:
    """One stream's frame, to be joined with the step's others by `join_step`."""
    # Without log probabilities the frame is as short on the wire as before they were added.
    if logprobs is None:
        return _encode((rid, seq, kind, text, tokens))
    return _encode(StepFrame(rid, seq, kind, text, tokens, logprobs))


def join_step(frames: list[bytes]) -> bytes:
    """A step message from its frames (each from `encode_step_frame`): no second encoding pass."""
    return b"[" + b",".join(frames) + b"]"


def encode_text(kind: TextKind, text: str, logprobs: list[dict[str, Any]] | None = None) -> bytes:
    return _encode((kind, text) if logprobs is None else TextFrame(kind, text, logprobs))


def encode_chat_frame(rid: str, kind: TextKind, text: str, logprobs: list[dict[str, Any]] | None = None) -> bytes:
    """One stream's released text, to be joined with the pass's others by `join_step`."""
    return _encode((rid, kind, text) if logprobs is None else ChatFrame(rid, kind, text, logprobs))


def decode_step(data: bytes) -> list[StepFrame] | RawChunk:
    """A step message (its streams' frames) or a stream's end."""
    return _frames_or_end(data, _steps, RawChunk, "a step message")


def _frames_or_end(data: bytes, frames: msgspec.json.Decoder[list[F]], end: type[E], what: str) -> list[F] | E:
    """A pass message (a JSON array of frames) or a stream's end (a JSON object), told apart by the first byte."""
    try:
        if data[:1] == b"[":
            return frames.decode(data)
        return end.model_validate_json(data)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as e:
        raise FrameError(f"not {what}: {e}") from e


# Every field's value in a `ChatEvent` that sets none of them (all immutable: None or ""), in field order.
_EVENT_DEFAULTS = {name: field.default for name, field in ChatEvent.model_fields.items()}
_TEXT_SET = frozenset(("rid", "type", "text"))
_set = object.__setattr__


def text_event(rid: str, kind: TextKind, text: str) -> ChatEvent:
    """`ChatEvent.model_construct(rid=rid, type=kind, text=text)`, the same object, made without pydantic's walk
    over every field's default: the gateway makes one per token, and that walk cost several times the rest."""
    values = _EVENT_DEFAULTS.copy()
    values["rid"], values["type"], values["text"] = rid, kind, text
    event = ChatEvent.__new__(ChatEvent)
    _set(event, "__dict__", values)
    _set(event, "__pydantic_fields_set__", set(_TEXT_SET))
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


def decode_event(rid: str, data: bytes) -> ChatEvent:
    """A chat event as the gateway handles it; a text frame becomes a `ChatEvent` without a second validation."""
    try:
        if data[:1] == b"[":
            frame = _text.decode(data)
            return released_event(rid, frame.kind, frame.text, frame.logprobs)
        return ChatEvent.model_validate_json(data)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as e:
        raise FrameError(f"not a chat event: {e}") from e


def decode_kept(rid: str, data: bytes) -> list[ChatEvent]:
    """A message of `chat.events.<rid>.*` as resuming reads it: the events it carries, in order. Every message
    is one event but a kept copy's coalesced text (`join_step` of `encode_text`s), which is one per frame."""
    if data[:2] != b"[[":  # no kind is an array: a frame array's first element is
        return [decode_event(rid, data)]
    try:
        frames = _texts.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise FrameError(f"not kept text: {e}") from e
    return [released_event(rid, f.kind, f.text, f.logprobs) for f in frames]


def released_event(rid: str, kind: TextKind, text: str, logprobs: list[dict[str, Any]] | None) -> ChatEvent:
    """Released text as the gateway handles it; its log probabilities are validated, since they are relayed
    to the client as they are."""
    if logprobs is not None:
        lps = [TokenLogprob.model_validate(x) for x in logprobs]
        return ChatEvent.model_construct(rid=rid, type=kind, text=text, logprobs=lps)
    return text_event(rid, kind, text)


def chat_frame_event(frame: ChatFrame) -> ChatEvent:
    """A `chat.steps` frame as the gateway handles it, as `decode_event` makes one from a `TextFrame`."""
    return released_event(frame.rid, frame.kind, frame.text, frame.logprobs)


def decode_chat_step(data: bytes) -> list[ChatFrame] | ChatEvent:
    """A `chat.steps` message: a pass's frames, or one stream's end."""
    return _frames_or_end(data, _chat_steps, ChatEvent, "a chat step message")
