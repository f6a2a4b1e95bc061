"""What the Open Responses specification (version 2026-04-24, openresponses.org) requires of the objects and
stream events this server sends, written out for the tests: the fields its `ResponseResource`, `FunctionTool`
and `Usage` schemas list as required, and each streamed event's shape, read against the server's own
response models (switchyard/services/gateway/responses/models.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from switchyard.services.gateway.responses.models import (
    FunctionCallItem,
    MessageItem,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseObject,
    ServerToolItem,
)

# ResponseResource's `required` list.
RESPONSE_REQUIRED = {
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "incomplete_details",
    "model",
    "previous_response_id",
    "instructions",
    "output",
    "error",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "usage",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
}
FUNCTION_TOOL_REQUIRED = {"type", "name", "description", "parameters", "strict"}
USAGE_REQUIRED = {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details", "output_tokens_details"}
MESSAGE_REQUIRED = {"type", "id", "status", "role", "content"}
FUNCTION_CALL_REQUIRED = {"type", "id", "call_id", "name", "arguments", "status"}


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sequence_number: int


class ResponseEvent(_Event):
    type: Literal[
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    response: ResponseObject


Item = Annotated[MessageItem | ReasoningItem | FunctionCallItem | ServerToolItem, Field(discriminator="type")]


class ItemEvent(_Event):
    type: Literal["response.output_item.added", "response.output_item.done"]
    output_index: int
    item: Item


class PartEvent(_Event):
    type: Literal["response.content_part.added", "response.content_part.done"]
    item_id: str
    output_index: int
    content_index: int
    part: Annotated[OutputText | ReasoningText, Field(discriminator="type")]


class DeltaEvent(_Event):
    type: Literal["response.output_text.delta", "response.reasoning_text.delta"]
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[object] | None = None


class TextDoneEvent(_Event):
    type: Literal["response.output_text.done", "response.reasoning_text.done"]
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[object] | None = None


class ArgumentsDeltaEvent(_Event):
    type: Literal["response.function_call_arguments.delta"]
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(_Event):
    type: Literal["response.function_call_arguments.done"]
    item_id: str
    output_index: int
    arguments: str


OpenEvent = Annotated[
    ResponseEvent | ItemEvent | PartEvent | DeltaEvent | TextDoneEvent | ArgumentsDeltaEvent | ArgumentsDoneEvent,
    Field(discriminator="type"),
]


def required(model: type[BaseModel]) -> set[str]:
    """The fields a body must carry to validate against `model` (no default)."""
    return {name for name, f in model.model_fields.items() if f.is_required()}
