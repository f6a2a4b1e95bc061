"""`POST /v1/messages`, compatible with the official Anthropic SDK: its streaming event sequence and the
non-streaming message. Thinking events become a thinking content block before the text."""

from __future__ import annotations

import copy
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ChatMessage, ErrorCode, Usage
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import (
    Gw,
    anthropic_thinking_ask,
    check_text,
    resolve_model,
    sampling,
    start_run,
)
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.messages.tools import (
    AnthropicTool,
    AnthropicToolChoice,
    pipeline_choice,
    result_text,
    tool_specs,
    tool_use_block,
    used,
)
from switchyard.services.gateway.params import Strict, refuse_unsupported
from switchyard.services.gateway.runs.relay import Encoder, frames_of, sse, stream_response, whole_answers
from switchyard.services.gateway.tool_calls import check_tool_grammars, parse_call

router = APIRouter()

STOP = {"stop": "end_turn", "length": "max_tokens", "cancelled": "end_turn", "blocked": "refusal", "error": "end_turn"}


class Block(Strict):
    # Prompt caching is automatic; an earlier turn's thinking blocks are dropped whole.
    IGNORED = frozenset({"cache_control", "thinking", "signature", "data"})
    type: str
    text: str | None = None
    # tool_use (an earlier call) and tool_result (its result, sent back by the client)
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: Any = None
    is_error: bool | None = None


class AnthropicMessage(Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class MessagesRequest(Strict):
    IGNORED = frozenset({"metadata", "service_tier"})
    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    stream: bool = Field(False, strict=True)
    thinking: dict[str, Any] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None


def _text(content: str | list[Block]) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for block in content:
        if block.type == "text" and block.text is not None:
            texts.append(block.text)
        elif block.type == "tool_use":
            texts.append(used(block.name, block.input))
        elif block.type == "tool_result":
            error = " (error)" if block.is_error else ""
            texts.append(f"Result of the function call{error}: {result_text(block.content)}")
        elif block.type not in ("thinking", "redacted_thinking"):  # earlier thinking is dropped, as Claude does
            raise ApiError(ErrorCode.bad_request, f"content block type {block.type!r} is not supported; send text")
    return "".join(texts)


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
    """Anthropic's streaming event sequence for one answer; its `ping` event keeps the line alive."""

    def __init__(self, rid: str, model: str, tool_names: set[str] | None = None):
        self.rid = rid
        self.model = model
        self.tool_names = tool_names or set()
        # With client tools the answer may turn out to be a call: its text is held until it is complete.
        self.held: list[str] = []
        self.blocks = _Blocks()

    def opening(self) -> list[ServerSentEvent]:
        message: dict[str, Any] = {
            "id": f"msg_{self.rid}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_json(Usage()),
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
            delta = {"type": "text_delta", "text": event.text}
            return [*blocks.switch("text"), _event("content_block_delta", index=blocks.index, delta=delta)]
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


@router.post("/v1/messages", responses=route_docs.json_or_sse())
async def messages(
    request: Request, gw: Gw, key: Principal, body: Annotated[MessagesRequest, json_body(MessagesRequest)]
) -> Response:
    refuse_unsupported(body)
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    thinking = anthropic_thinking_ask(body.thinking)
    if body.messages[-1].role != "user":
        raise ApiError(ErrorCode.bad_request, "messages must end with a user message")
    text = check_text(gw.settings, _text(body.messages[-1].content), "the last user message")
    earlier = [ChatMessage(role=m.role, content=_text(m.content)) for m in body.messages[:-1]]
    system = _text(body.system) if body.system is not None else None
    tool_choice = pipeline_choice(body.tools, body.tool_choice)
    tool_names = {t.name for t in body.tools or []} if tool_choice != "none" else set()
    check_tool_grammars(
        [(f"tools[{i}].input_schema", t.input_schema) for i, t in enumerate(body.tools or [])], gw.settings.grammar
    )
    run = await start_run(
        gw,
        request,
        key,
        api="anthropic",
        route="POST /v1/messages",
        text=text,
        messages=earlier,
        system=system or None,
        model=model,
        mode=mode,
        sampling=sampling(
            gw.settings,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            max_tokens=body.max_tokens,
            stop=body.stop_sequences,
        ),
        client_tools=tool_specs(body.tools),
        tool_choice=tool_choice,
        thinking=thinking,
    )
    if body.stream:
        return await stream_response(gw, [run], request, MessageEncoder(run.rid, model, tool_names))
    answers = await whole_answers(gw, [run], request)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(fold_message(frames_of(MessageEncoder(run.rid, model, tool_names), answers)))
