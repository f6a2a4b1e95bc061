"""The `text_completion` object (OpenAI's legacy non-streamed answer), as the route documents it:
`completion_json` builds it and the route returns it as built, so this model describes the wire."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class LegacyLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    text: str
    # prompt_index * n + j, as OpenAI numbers them.
    index: int
    logprobs: LegacyLogprobs | None
    finish_reason: Literal["stop", "length", "content_filter"]


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[CompletionChoice]
    usage: CompletionUsage
