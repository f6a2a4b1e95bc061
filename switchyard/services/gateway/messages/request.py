"""`POST /v1/messages`'s request: Anthropic's body, and the pipeline's reading of its messages (earlier turns,
the new user text, and an assistant prefill the answer continues)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from switchyard.schemas import ChatMessage, ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.messages.tools import AnthropicTool, AnthropicToolChoice, result_text, used
from switchyard.services.gateway.params import Strict


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


def content_text(content: str | list[Block]) -> str:
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


def take_prefill(messages: list[AnthropicMessage]) -> tuple[list[AnthropicMessage], str | None]:
    """Anthropic's prefill: a final assistant message is the start of the answer, which the model continues
    (the answer returned does not repeat it). (the messages before it, its text or None). As Anthropic does,
    its text may not end in whitespace, and an empty one is no prefill."""
    final = messages[-1]
    if final.role != "assistant":
        return messages, None
    if not isinstance(final.content, str) and any(b.type != "text" for b in final.content):
        raise ApiError(ErrorCode.bad_request, "a final assistant message (a prefill) must be text")
    text = content_text(final.content)
    if text != text.rstrip():
        raise ApiError(ErrorCode.bad_request, "final assistant content cannot end with trailing whitespace")
    return messages[:-1], text or None


def split_messages(messages: list[AnthropicMessage]) -> tuple[list[ChatMessage], str]:
    """(earlier turns, the new user text): the last message (before a prefill) must be the user's."""
    if not messages or messages[-1].role != "user":
        raise ApiError(ErrorCode.bad_request, "messages must end with a user message (or a user message and a prefill)")
    earlier = [ChatMessage(role=m.role, content=content_text(m.content)) for m in messages[:-1]]
    return earlier, content_text(messages[-1].content)
