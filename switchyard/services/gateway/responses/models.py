"""The Responses API's answer objects as the API document shows them: the response (every field the Open
Responses specification requires, in its shape), its output items, the deletion and compaction objects.

The encoder builds these bodies as dicts (one encode per frame on the token path); the routes declare these
models as their `response_model` for the document, and the tests validate every body against them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    # A field added later (or a vendor's) must not break a reader of these models.
    model_config = ConfigDict(extra="allow")


class InputTokensDetails(_Out):
    cached_tokens: int
    cache_write_tokens: int = 0


class OutputTokensDetails(_Out):
    reasoning_tokens: int


class ResponseUsage(_Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class OutputText(_Out):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any] = Field(default_factory=list)


class ReasoningText(_Out):
    type: Literal["reasoning_text"]
    text: str


class InputText(_Out):
    type: Literal["input_text"]
    text: str


class MessageItem(_Out):
    id: str
    type: Literal["message"]
    role: Literal["assistant", "user", "system", "developer"]
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputText | InputText]


class ReasoningItem(_Out):
    id: str
    type: Literal["reasoning"]
    status: Literal["in_progress", "completed", "incomplete"]
    summary: list[Any]
    content: list[ReasoningText]


class FunctionCallItem(_Out):
    id: str
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"]


class ServerToolItem(_Out):
    """A step of the pipeline's own tools (orders, document search, code, web), run before the model writes:
    OpenAI's `mcp_call` item, under this server's label."""

    id: str
    type: Literal["mcp_call"]
    server_label: str
    name: str
    arguments: str
    output: str | None
    error: str | None
    status: Literal["calling", "completed", "failed"]


class CompactionItem(_Out):
    """The earlier turns of a conversation as one opaque item (`POST /v1/responses/compact`): sent back as
    input, it stands for them."""

    id: str
    type: Literal["compaction"]
    encrypted_content: str
    created_by: str | None = None


OutputItem = MessageItem | ReasoningItem | FunctionCallItem | ServerToolItem


class FunctionToolEcho(_Out):
    type: Literal["function"]
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


class FunctionChoiceEcho(_Out):
    type: Literal["function"]
    name: str


class TextEcho(_Out):
    format: dict[str, Any]


class ReasoningEcho(_Out):
    effort: str | None
    summary: str | None


class IncompleteDetails(_Out):
    reason: str


class ResponseError(_Out):
    code: str
    message: str


class ResponseObject(_Out):
    """A response: as created, while it runs, at its end, and read back by id. Every parameter the request
    gave (or its default) is echoed; `completed_at` is null until it completes."""

    id: str
    object: Literal["response"]
    created_at: int
    completed_at: int | None
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    background: bool
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    metadata: dict[str, str]
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    prompt_cache_key: str | None
    reasoning: ReasoningEcho | None
    safety_identifier: str | None
    service_tier: str
    store: bool
    temperature: float
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    top_logprobs: int
    text: TextEcho
    tool_choice: Literal["auto", "none", "required"] | FunctionChoiceEcho
    tools: list[FunctionToolEcho]
    truncation: Literal["auto", "disabled"]
    usage: ResponseUsage | None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: bool


class CompactionObject(_Out):
    """`POST /v1/responses/compact`: the compacted input window (the user's messages as they were, and one
    compaction item for everything else), to be sent as the base `input` of a new response."""

    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[MessageItem | CompactionItem]
    usage: ResponseUsage
