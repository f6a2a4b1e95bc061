"""`POST /v1/chat/completions`'s request: OpenAI's body with vLLM's extensions, and the pipeline's reading
of its messages (system text, earlier turns, the new user text, and the answer's start it continues)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchyard.schemas import ChatMessage, ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.response_format import ResponseFormatIn, StructuredOutputs
from switchyard.services.gateway.tool_calls import NamedChoice, ToolDef, render_call


class ContentPart(Strict):
    type: str
    text: str | None = None


class OpenAIMessage(Strict):
    # What the SDK echoes back on an earlier assistant message, and the participant name.
    IGNORED = frozenset({"name", "refusal", "annotations", "reasoning_content"})
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class StreamOptions(Strict):
    IGNORED = frozenset({"include_obfuscation"})
    include_usage: bool = Field(False, strict=True)


class CompletionRequest(Strict):
    IGNORED = frozenset({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})
    model: str = Field(min_length=1)
    messages: list[OpenAIMessage] = Field(min_length=1)
    temperature: float | None = None
    top_p: float | None = None
    # vLLM's extensions (the SDK sends them in extra_body): -1 or 0 is off; strict, so 2.5 or "5" is a 400.
    top_k: int | None = Field(None, strict=True)
    min_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    # Strict: "yes" or 1 is a mistake to report, not a truthy value to stream on.
    stream: bool = Field(False, strict=True)
    stream_options: StreamOptions | None = None
    # Each of the n answers is its own request through the pipeline (seed, seed+1, ...); the engine's
    # prefix cache shares the prompt's KV blocks between them.
    n: int = Field(1, ge=1, le=8)
    reasoning_effort: str | None = None
    tools: list[ToolDef] | None = None
    tool_choice: str | NamedChoice | None = None
    # OpenAI's default: an answer may carry several calls; false: at most one.
    parallel_tool_calls: bool | None = Field(None, strict=True)
    ignore_eos: bool = False  # vLLM's extension: decode to max_tokens (benchmarks)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None  # vLLM's extension
    # Token ids (JSON keys are strings) to a bias from -100 to 100, as OpenAI bounds it.
    logit_bias: dict[int, Annotated[float, Field(ge=-100, le=100)]] | None = None
    response_format: ResponseFormatIn | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    structured_outputs: StructuredOutputs | None = None  # vLLM's extension
    # vLLM's extension: the engine's scheduling priority, lower sooner; only at or behind the key's tier's (a 400
    # names the range). Strict: 2.5 or "1" is a mistake to report.
    priority: int | None = Field(None, strict=True)
    # vLLM's template switches. None: the default (a generation prompt, unless the final message is continued);
    # both true is refused, as vLLM refuses it.
    add_generation_prompt: bool | None = Field(None, strict=True)
    continue_final_message: bool = Field(False, strict=True)


def _text(message: OpenAIMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise ApiError(ErrorCode.bad_request, f"content part type {part.type!r} is not supported; send text")
        texts.append(part.text)
    return "".join(texts)


def _as_chat(m: OpenAIMessage) -> ChatMessage:
    if m.role == "tool":
        return ChatMessage(role="tool", content=_text(m))
    if m.role == "assistant" and m.tool_calls:
        calls = "".join(
            render_call(str(c.get("function", {}).get("name", "")), str(c.get("function", {}).get("arguments", "")))
            for c in m.tool_calls
        )
        return ChatMessage(role="assistant", content=_text(m) + calls)
    return ChatMessage(role="user" if m.role == "user" else "assistant", content=_text(m))


def split_messages(messages: list[OpenAIMessage]) -> tuple[str | None, list[ChatMessage], str]:
    """(system, earlier turns, the new user text); the last message must be the user's, or a tool
    result the client sends back, which becomes the new user turn marked as that function's result."""
    system = [_text(m) for m in messages if m.role in ("system", "developer")]
    turns = [m for m in messages if m.role not in ("system", "developer")]
    if not turns or turns[-1].role not in ("user", "tool"):
        raise ApiError(ErrorCode.bad_request, "messages must end with a user message or a tool result")
    earlier = [_as_chat(m) for m in turns[:-1]]
    last = turns[-1]
    text = _text(last) if last.role == "user" else f"Result of the function call: {_text(last)}"
    return ("\n\n".join(system) or None), earlier, text


def take_prefill(
    messages: list[OpenAIMessage], continue_final_message: bool, add_generation_prompt: bool | None
) -> tuple[list[OpenAIMessage], str | None, bool]:
    """vLLM's `continue_final_message` and `add_generation_prompt`: (the messages before the continued one,
    the text the answer continues or None, whether the prompt ends with a generation prompt). The continued
    message is the assistant's; the answer returned does not repeat it."""
    if continue_final_message and add_generation_prompt:
        raise ApiError(
            ErrorCode.bad_request, "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    if not continue_final_message:
        return messages, None, add_generation_prompt is not False
    final = messages[-1]
    if final.role != "assistant" or final.tool_calls:
        raise ApiError(
            ErrorCode.bad_request, "continue_final_message needs the final message to be the assistant's text"
        )
    text = _text(final)
    # An empty start is no start: the answer begins a new assistant message.
    return messages[:-1], text or None, not text


def logprobs_of(logprobs: bool | None, top: int | None) -> int | None:
    if top and not logprobs:
        raise ApiError(ErrorCode.bad_request, "top_logprobs needs logprobs: true")
    return (top or 0) if logprobs else None
