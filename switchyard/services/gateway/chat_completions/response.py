"""The `chat.completion` object (OpenAI's non-streamed answer), as the route documents it: `fold_chunks`
builds it and the route returns it as built, so this model describes the wire and never re-encodes it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from switchyard.schemas import TokenLogprob


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    id: str
    type: Literal["function"]
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    # None when the answer is a tool call.
    content: str | None
    refusal: None = None
    # The model's thinking, where it thought (vLLM's and DeepSeek's field).
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]
    refusal: None = None


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    # content_filter: output safety stopped this answer (with `n`, the others are unaffected).
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter"]


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens served from the prefix cache


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    # The engine build that answered (engine, its version, the model file): equal fingerprints, equal builds.
    system_fingerprint: str | None
    choices: list[Choice]
    usage: ChatUsage
