"""Anthropic's `Message` (the non-streamed answer), as the route documents it: `fold_message` builds it and the
route returns it as built, so this model describes the wire and never re-encodes it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class MessageUsage(BaseModel):
    # Prompt tokens not read from the prefix cache; those read are `cache_read_input_tokens`.
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


class Message(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    # Only what the model wrote: a prefill the request ended with is not repeated.
    content: list[Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"] | None
    stop_sequence: str | None
    usage: MessageUsage
