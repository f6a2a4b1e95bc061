"""The Messages API's one encoder: a run's events as Anthropic's streaming event sequence (pure: events in,
SSE events out), and the whole message as the fold of those same events. Thinking becomes a thinking
content block before the text."""

from __future__ import annotations

import copy
import json
from typing import Any

from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, Usage
from switchyard.services.gateway.messages.tools import tool_use_block
from switchyard.services.gateway.runs.relay import TEXT_SLOT, Encoder, Frame, json_str, json_template, sse
from switchyard.services.gateway.tool_calls import parse_call

STOP = {"stop": "end_turn", "length": "max_tokens", "cancelled": "end_turn", "blocked": "refusal", "error": "end_turn"}


def usage_json(usage: Usage) -> dict[str, Any]:
    # Anthropic counts cache reads apart from input tokens.
    return {
        "input_tokens": max(0, usage.prompt_tokens - usage.cached_tokens),
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _event(kind: str, **data: Any) -> ServerSentEvent:
    return sse({"type": kind, **data}, event=kind)


class _Blocks:
    """Opens a content block when the kind of content changes and closes the one before."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: str | None = None

    def switch(self, kind: str) -> list[ServerSentEvent]:
        if kind == self.kind:
            return []
        out = self.close()
        self.index += 1
        self.kind = kind
        block = (
            {"type": "thinking", "thinking": "", "signature": ""}
            if kind == "thinking"
            else {"type": "text", "text": ""}
        )
        out.append(_event("content_block_start", index=self.index, content_block=block))
        return out

    def close(self) -> list[ServerSentEvent]:
        if self.kind is None:
            return []
        self.kind = None
        return [_event("content_block_stop", index=self.index)]


def _call_events(index: int, call: dict[str, Any]) -> list[ServerSentEvent]:
    block = tool_use_block(call)
    start = {**block, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    return [
        _event("content_block_start", index=index, content_block=start),
        _event("content_block_delta", index=index, delta=delta),
        _event("content_block_stop", index=index),
    ]


class MessageEncoder(Encoder):
    """Anthropic's streaming event sequence for one answer; its `ping` event keeps the line alive.
    `input_tokens`: the prompt's tokens as the engine reported them on starting, for `message_start` (the
    final count, cache reads apart, follows in `message_delta`)."""

    def __init__(self, rid: str, model: str, tool_names: set[str] | None = None, input_tokens: int | None = None):
        self.rid = rid
        self.model = model
        self.tool_names = tool_names or set()
        self.input_tokens = input_tokens or 0
        # With client tools the answer may turn out to be a call: its text is held until it is complete.
        self.held: list[str] = []
        self.blocks = _Blocks()
        # A text delta's event per content block, around its text: built once, not per token.
        self.delta_json: dict[int, tuple[str, str]] = {}

    def opening(self) -> list[ServerSentEvent]:
        message: dict[str, Any] = {
            "id": f"msg_{self.rid}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_json(Usage(prompt_tokens=self.input_tokens)),
        }
        return [_event("message_start", message=message), _event("ping")]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        blocks = self.blocks
        if event.type == "thinking":
            delta = {"type": "thinking_delta", "thinking": event.text}
            return [*blocks.switch("thinking"), _event("content_block_delta", index=blocks.index, delta=delta)]
        if event.type == "delta" and self.tool_names:
            self.held.append(event.text)
            return []
        if event.type == "delta":
            out = blocks.switch("text")
            template = self.delta_json.get(blocks.index)
            if template is None:
                delta = {"type": "text_delta", "text": TEXT_SLOT}
                data = {"type": "content_block_delta", "index": blocks.index, "delta": delta}
                template = self.delta_json[blocks.index] = json_template(data)
            before, after = template
            return [*out, Frame(before + json_str(event.text) + after, event="content_block_delta")]
        if event.type == "done":
            return self._done(event)
        if event.type == "error" and event.error is not None:
            return [_event("error", error=event.error.model_dump(mode="json"))]
        return []

    def _done(self, event: ChatEvent) -> list[ServerSentEvent]:
        blocks = self.blocks
        out: list[ServerSentEvent] = []
        stop = STOP.get(event.finish_reason or "stop", "end_turn")
        held = "".join(self.held)
        call = parse_call(held, self.tool_names) if self.tool_names else None
        if call is not None:
            out += blocks.close()
            blocks.index += 1
            out += _call_events(blocks.index, call)
            stop = "tool_use"
        elif held:
            out += blocks.switch("text")
            out.append(_event("content_block_delta", index=blocks.index, delta={"type": "text_delta", "text": held}))
        if blocks.index < 0:
            out += blocks.switch("text")
        out += blocks.close()
        out.append(
            _event(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage=usage_json(event.usage or Usage()),
            )
        )
        out.append(_event("message_stop"))
        return out

    def keepalive(self) -> ServerSentEvent:
        return _event("ping")


def fold_message(frames: list[Any]) -> dict[str, Any]:
    """The whole message: the fold of the events `MessageEncoder` streams (pings and errors carry nothing)."""
    msg: dict[str, Any] = {}
    partial: dict[int, str] = {}  # a tool_use block's input, as its JSON arrives
    for frame in frames:
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "message_start":
            msg = copy.deepcopy(frame["message"])
        elif kind == "content_block_start":
            msg["content"].insert(frame["index"], copy.deepcopy(frame["content_block"]))
        elif kind == "content_block_delta":
            block, delta = msg["content"][frame["index"]], frame["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                partial[frame["index"]] = partial.get(frame["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop" and frame["index"] in partial:
            msg["content"][frame["index"]]["input"] = json.loads(partial.pop(frame["index"]))
        elif kind == "message_delta":
            msg.update(frame["delta"])
            msg["usage"] = {**msg["usage"], **frame["usage"]}
    return msg
