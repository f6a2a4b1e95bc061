"""The per-token frames: the hot path's compact wire form (msgspec), typed and validated once on decode.

Two subjects carry an answer token by token: `stream.raw.<rid>` (inference → safety_out) and
`chat.events.<rid>` (safety_out → gateway). Every other message is a pydantic model in JSON; a text
frame on these two subjects is a JSON array instead, so one look at the first byte tells them apart:

- `stream.raw.<rid>`: `[seq, kind, text, tokens]` (`RawFrame`) for text, then one `RawChunk` object
  (finished, with usage, error or logprobs) that ends the stream.
- `chat.events.<rid>`: `[kind, text]` (`TextFrame`) for `delta` and `thinking` events; every other
  event (`tool`, `holder`, `done`, `error`) stays a `ChatEvent` object.

When the request asked for log probabilities, an answer's frames on both subjects carry one more
element: the `TokenLogprob` items (as JSON objects) of the tokens whose text the frame carries.

A frame carries every token its stream produced since the previous frame (at most one engine step
old), so a fast engine sends fewer, larger frames and a slow one still sends one per token. Frames have
no NATS headers: the rid is in the subject, and the request's trace and deadline travel with the
messages that open and end the stream.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from switchyard.schemas.messages import ChatEvent, RawChunk, TokenLogprob

TextKind = Literal["delta", "thinking"]


class RawFrame(msgspec.Struct, array_like=True, frozen=True):
    """Answer (or thinking) text on `stream.raw.<rid>`; `seq` counts frames from 0, `tokens` the tokens in it."""

    seq: int
    kind: TextKind
    text: str
    tokens: int = 1
    logprobs: list[dict[str, Any]] | None = None  # the frame's tokens' `TokenLogprob` items, when asked for


class TextFrame(msgspec.Struct, array_like=True, frozen=True):
    """A `delta` or `thinking` event on `chat.events.<rid>`."""

    kind: TextKind
    text: str
    # The text's own tokens' `TokenLogprob` items, when asked for and output safety left the text unchanged.
    logprobs: list[dict[str, Any]] | None = None


_encode = msgspec.json.Encoder().encode
_raw = msgspec.json.Decoder(RawFrame)
_text = msgspec.json.Decoder(TextFrame)


class FrameError(ValueError):
    """Bytes on a frame subject that are neither a frame nor the subject's model."""


def encode_raw(
    seq: int, kind: TextKind, text: str, tokens: int = 1, logprobs: list[dict[str, Any]] | None = None
) -> bytes:
    # Without log probabilities the frame is as short on the wire as before they were added.
    return _encode((seq, kind, text, tokens) if logprobs is None else RawFrame(seq, kind, text, tokens, logprobs))


def encode_text(kind: TextKind, text: str, logprobs: list[dict[str, Any]] | None = None) -> bytes:
    return _encode((kind, text) if logprobs is None else TextFrame(kind, text, logprobs))


def decode_raw(data: bytes) -> RawFrame | RawChunk:
    try:
        if data[:1] == b"[":
            return _raw.decode(data)
        return RawChunk.model_validate_json(data)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as e:
        raise FrameError(f"not a raw-stream frame: {e}") from e


def decode_event(rid: str, data: bytes) -> ChatEvent:
    """A chat event as the gateway handles it; a text frame becomes a `ChatEvent` without a second validation."""
    try:
        if data[:1] == b"[":
            frame = _text.decode(data)
            if frame.logprobs is not None:  # validated: they are relayed to the client as they are
                lps = [TokenLogprob.model_validate(x) for x in frame.logprobs]
                return ChatEvent.model_construct(rid=rid, type=frame.kind, text=frame.text, logprobs=lps)
            return ChatEvent.model_construct(rid=rid, type=frame.kind, text=frame.text)
        return ChatEvent.model_validate_json(data)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as e:
        raise FrameError(f"not a chat event: {e}") from e
