"""`POST /v1/completions`'s request: OpenAI's legacy text completion body, and its prompts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.chat_completions.request import StreamOptions
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict

# Prompts in one request, and answers in all (prompts x n): each answer is a pipeline request of its own.
MAX_PROMPTS = 8
MAX_ANSWERS = 16
# OpenAI's legacy default: a text completion is short unless asked otherwise.
DEFAULT_MAX_TOKENS = 16


class TextCompletionRequest(Strict):
    IGNORED = frozenset({"user"})
    model: str = Field(min_length=1)
    # A string or a list of strings; token arrays are refused (400) below, by name.
    prompt: str | list[Any]
    suffix: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=8)
    # The legacy API's top-N: each token's log probability with this many alternatives.
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = Field(False, strict=True)
    stream: bool = Field(False, strict=True)
    stream_options: StreamOptions | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[int, Annotated[float, Field(ge=-100, le=100)]] | None = None
    # vLLM's extension: the engine's scheduling priority, lower sooner; only at or behind the key's tier's (a 400
    # names the range). Strict: 2.5 or "1" is a mistake to report.
    priority: int | None = Field(None, strict=True)


def prompts_of(body: TextCompletionRequest) -> list[str]:
    if isinstance(body.prompt, str):
        return [body.prompt]
    if not body.prompt:
        raise ApiError(ErrorCode.bad_request, "prompt is an empty list")
    if not all(isinstance(p, str) for p in body.prompt):
        raise ApiError(ErrorCode.bad_request, "prompt as token ids is not served: send a string or a list of strings")
    if len(body.prompt) > MAX_PROMPTS:
        raise ApiError(ErrorCode.bad_request, f"prompt has {len(body.prompt)} strings; the limit is {MAX_PROMPTS}")
    return list(body.prompt)
