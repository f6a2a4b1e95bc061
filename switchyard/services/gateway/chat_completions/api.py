"""`POST /v1/chat/completions`, compatible with the official OpenAI SDK (streaming and not)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ChatMessage, ErrorCode, TokenLogprob, Usage
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import (
    MAX_SEED,
    Gw,
    check_text,
    effort_ask,
    request_id,
    resolve_model,
    sampling,
    start_run,
)
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict, refuse_unsupported
from switchyard.services.gateway.response_format import ResponseFormatIn, StructuredOutputs, response_format_of
from switchyard.services.gateway.runs.relay import Encoder, frames_of, sse, stream_response, whole_answers
from switchyard.services.gateway.runs.run import Run
from switchyard.services.gateway.tool_calls import (
    NamedChoice,
    ToolDef,
    check_tool_grammars,
    choice_of,
    parse_calls,
    render_call,
    specs,
)

router = APIRouter()

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "blocked": "content_filter", "error": "stop"}


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


def usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def answers_usage(usages: list[Usage]) -> Usage:
    """The usage of `n` answers to one prompt: the prompt counted once, the answers' tokens summed."""
    return usages[0].model_copy(
        update={
            "completion_tokens": sum(u.completion_tokens for u in usages),
            "reasoning_tokens": sum(u.reasoning_tokens for u in usages),
        }
    )


class ChunkEncoder(Encoder):
    """The chunks of one or several (`n`) answers (choice `index` each), then the usage chunk (the prompt
    counted once) and `[DONE]`; a comment keeps the line alive."""

    def __init__(
        self,
        rid: str,
        model: str,
        include_usage: bool,
        answers: int,
        tool_names: set[str] | None = None,
        max_calls: int | None = None,
    ):
        self.base = {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": None,
        }
        self.include_usage = include_usage
        self.answers = answers
        self.tool_names = tool_names or set()
        self.max_calls = max_calls
        # With client tools an answer may turn out to be a call: its text is held until it is complete.
        self.held: list[list[str]] = [[] for _ in range(answers)]
        # Whether an answer's log probabilities came with its text chunks (then not again at its end).
        self.lp_streamed = [False] * answers
        self.usages: list[Usage] = []

    def choice(
        self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None, index: int = 0
    ) -> ServerSentEvent:
        chunk: dict[str, Any] = {
            **self.base,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def opening(self) -> list[ServerSentEvent]:
        return [self.choice({"role": "assistant", "content": ""}, index=i) for i in range(self.answers)]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta":
            if self.tool_names:
                self.held[index].append(event.text)
                return []
            if event.logprobs is not None:  # the text's own tokens: output safety released them unchanged
                self.lp_streamed[index] = True
                return [self.choice({"content": event.text}, None, entries_json(event.logprobs), index=index)]
            return [self.choice({"content": event.text}, index=index)]
        if event.type == "thinking":
            # The field vLLM and DeepSeek use; SDK clients read it from the delta's extra fields.
            return [self.choice({"reasoning_content": event.text}, index=index)]
        if event.type == "done":
            return self._done(index, event)
        if event.type == "error" and event.error is not None:
            return [sse({"error": event.error.model_dump(mode="json")})]
        return []

    def _done(self, index: int, event: ChatEvent) -> list[ServerSentEvent]:
        out = []
        finish = FINISH.get(event.finish_reason or "stop", "stop")
        held = "".join(self.held[index])
        calls = parse_calls(held, self.tool_names, self.max_calls) if self.tool_names else []
        if calls:
            # One chunk per call, each naming its place in the message's `tool_calls`.
            out += [self.choice({"tool_calls": [{"index": i, **call}]}, index=index) for i, call in enumerate(calls)]
            finish = "tool_calls"
        elif held:
            # Held until the answer turned out to be prose: its log probabilities come with it.
            out.append(self.choice({"content": held}, None, logprobs_json(event), index=index))
            self.lp_streamed[index] = True
        if event.logprobs is not None and not self.lp_streamed[index]:
            # Not streamed with the text (a tool call's, or a producer that sends them only at the end):
            # whole, after the text.
            out.append(self.choice({}, None, logprobs_json(event), index=index))
        out.append(self.choice({}, finish, index=index))
        self.usages.append(event.usage or Usage())
        return out

    def closing(self) -> list[ServerSentEvent]:
        out = []
        if self.include_usage and self.usages:
            out.append(sse({**self.base, "choices": [], "usage": usage_json(answers_usage(self.usages))}))
        return [*out, sse("[DONE]")]


def entries_json(entries: list[TokenLogprob]) -> dict[str, Any]:
    return {"content": [t.model_dump() for t in entries], "refusal": None}


def logprobs_json(done: ChatEvent) -> dict[str, Any] | None:
    return None if done.logprobs is None else entries_json(done.logprobs)


def fold_chunks(chunks: list[Any]) -> dict[str, Any]:
    """The `chat.completion` body: the fold of the chunks `ChunkEncoder` streams (with the usage chunk), one
    choice per answer (several with `n`)."""
    body: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict) or "choices" not in chunk:
            continue  # `[DONE]`
        if not body:
            body = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint")}
        if chunk.get("usage") is not None:
            body["usage"] = chunk["usage"]
        for c in chunk["choices"]:
            message = {"role": "assistant", "content": "", "refusal": None}
            choice = choices.setdefault(
                c["index"], {"index": c["index"], "message": message, "logprobs": None, "finish_reason": None}
            )
            delta, message = c["delta"], choice["message"]
            if delta.get("content"):
                message["content"] += delta["content"]
            if delta.get("reasoning_content"):
                message["reasoning_content"] = message.get("reasoning_content", "") + delta["reasoning_content"]
            if delta.get("tool_calls"):  # one chunk per call, in order
                message["content"] = None
                calls = message.setdefault("tool_calls", [])
                calls += [{k: v for k, v in t.items() if k != "index"} for t in delta["tool_calls"]]
            if c.get("logprobs") is not None:  # with their tokens' chunks, or whole after the text
                if choice["logprobs"] is None:
                    choice["logprobs"] = {"content": [], "refusal": None}
                choice["logprobs"]["content"] += c["logprobs"]["content"]
            if c.get("finish_reason") is not None:
                choice["finish_reason"] = c["finish_reason"]
    return {
        "id": body["id"],
        "object": "chat.completion",
        "created": body["created"],
        "model": body["model"],
        "system_fingerprint": body["system_fingerprint"],
        "choices": [choices[i] for i in sorted(choices)],
        "usage": body["usage"],
    }


def logprobs_of(logprobs: bool | None, top: int | None) -> int | None:
    if top and not logprobs:
        raise ApiError(ErrorCode.bad_request, "top_logprobs needs logprobs: true")
    return (top or 0) if logprobs else None


@router.post("/v1/chat/completions", responses=route_docs.json_or_sse())
async def chat_completions(
    request: Request, gw: Gw, key: Principal, body: Annotated[CompletionRequest, json_body(CompletionRequest)]
) -> Response:
    refuse_unsupported(body)
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    thinking = effort_ask(body.reasoning_effort)
    system, earlier, text = split_messages(body.messages)
    tool_choice = choice_of(body.tools, body.tool_choice)
    tool_names = {t.function.name for t in body.tools or []} if tool_choice != "none" else set()
    parallel = body.parallel_tool_calls is not False
    max_calls = None if parallel else 1
    check_tool_grammars(
        [(f"tools[{i}].function.parameters", t.function.parameters) for i, t in enumerate(body.tools or [])],
        gw.settings.grammar,
    )
    check_text(gw.settings, text, "the last user message")
    asked = sampling(
        gw.settings,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        max_tokens=body.max_tokens if body.max_completion_tokens is None else body.max_completion_tokens,
        seed=body.seed,
        stop=body.stop,
        ignore_eos=body.ignore_eos,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        repetition_penalty=body.repetition_penalty,
        logit_bias=body.logit_bias,
        response_format=response_format_of(body.response_format, body.structured_outputs, gw.settings.grammar),
        logprobs=logprobs_of(body.logprobs, body.top_logprobs),
    )
    runs: list[Run] = []
    try:
        for i in range(body.n):
            runs.append(
                await start_run(
                    gw,
                    request,
                    key,
                    api="openai",
                    route="POST /v1/chat/completions",
                    text=text,
                    messages=earlier,
                    system=system,
                    model=model,
                    mode=mode,
                    sampling=asked.model_copy(update={"seed": ((asked.seed or 0) + i) % (MAX_SEED + 1)}),
                    client_tools=specs(body.tools),
                    tool_choice=tool_choice,
                    rid=None if i == 0 else f"{request_id(request)}-{i}",
                    parallel_tool_calls=parallel,
                    thinking=thinking,
                    priority=body.priority,
                )
            )
    except ApiError:
        for r in runs:  # the answers already started are not wanted without the rest
            await gw.runs.cancel(r, "sibling_refused")
        raise
    run = runs[0]
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        encoder = ChunkEncoder(run.rid, model, include_usage, len(runs), tool_names, max_calls)
        return await stream_response(gw, runs, request, encoder)
    answers = await whole_answers(gw, runs, request)
    if isinstance(answers, JSONResponse):
        return answers
    encoder = ChunkEncoder(run.rid, model, True, len(runs), tool_names, max_calls)
    return JSONResponse(fold_chunks(frames_of(encoder, answers)))
