"""`POST /v1/completions`: OpenAI's legacy text completions, for any served model (base models included).

The prompt is the whole prompt: it travels with `prompt_mode="raw"`, so the context stage passes it to the
engine verbatim (no chat template, history or system block) while input and output safety still run. Each
prompt times `n` is its own request through the pipeline (seed, seed+1, ...); choice `index` is
`prompt_index * n + j`, as OpenAI numbers them."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ErrorCode, TokenLogprob, Usage
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.chat_completions.api import FINISH, StreamOptions
from switchyard.services.gateway.core import MAX_SEED, Gw, check_text, request_id, resolve_model, sampling, start_run
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict, refuse_unsupported
from switchyard.services.gateway.runs.relay import Encoder, sse, stream_response, whole_answers
from switchyard.services.gateway.runs.run import Run

router = APIRouter()

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


def legacy_logprobs(tokens: list[TokenLogprob] | None, offset: int) -> dict[str, Any] | None:
    """OpenAI's legacy shape: parallel lists of tokens, their log probabilities, each position's top
    alternatives as {token: logprob}, and each token's character offset in the choice's text."""
    if tokens is None:
        return None
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [{a.token: a.logprob for a in t.top_logprobs} for t in tokens],
        "text_offset": offsets,
    }


def usage_json(usages: list[Usage], n: int) -> dict[str, Any]:
    # Each prompt counts once, however many answers it had; every answer's tokens count.
    prompt = sum(u.prompt_tokens for u in usages[::n])
    completion = sum(u.completion_tokens for u in usages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class TextChunkEncoder(Encoder):
    """`text_completion` chunks per answer (the echoed prompt first), the log probabilities whole after an
    answer's text, its finish, then the usage chunk when asked for, and `[DONE]`."""

    def __init__(self, rid: str, model: str, prompts: list[str], n: int, echo: bool, include_usage: bool):
        self.base = {"id": f"cmpl-{rid}", "object": "text_completion", "created": int(time.time()), "model": model}
        self.prompts, self.n, self.echo, self.include_usage = prompts, n, echo, include_usage
        self.usages: dict[int, Usage] = {}

    def chunk(self, index: int, text: str, logprobs: Any = None, finish: str | None = None) -> ServerSentEvent:
        choice = {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}
        return sse({**self.base, "choices": [choice]})

    def opening(self) -> list[ServerSentEvent]:
        if not self.echo:
            return []
        return [self.chunk(i, self.prompts[i // self.n]) for i in range(len(self.prompts) * self.n)]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta":
            return [self.chunk(index, event.text)]
        if event.type == "done":
            self.usages[index] = event.usage or Usage()
            out = []
            if event.logprobs is not None:
                out.append(self.chunk(index, "", legacy_logprobs(event.logprobs, 0)))
            return [*out, self.chunk(index, "", finish=FINISH.get(event.finish_reason or "stop", "stop"))]
        if event.type == "error" and event.error is not None:
            return [sse({"error": event.error.model_dump(mode="json")})]
        return []

    def closing(self) -> list[ServerSentEvent]:
        out = []
        if self.include_usage and self.usages:
            usages = [self.usages.get(i, Usage()) for i in range(len(self.prompts) * self.n)]
            out.append(sse({**self.base, "choices": [], "usage": usage_json(usages, self.n)}))
        return [*out, sse("[DONE]")]


def completion_json(
    rid: str, model: str, prompts: list[str], n: int, echo: bool, answers: list[list[ChatEvent]]
) -> dict[str, Any]:
    choices = []
    for i, events in enumerate(answers):
        prompt = prompts[i // n]
        text = "".join(e.text for e in events if e.type == "delta")
        choices.append(
            {
                "text": prompt + text if echo else text,
                "index": i,
                "logprobs": legacy_logprobs(events[-1].logprobs, len(prompt) if echo else 0),
                "finish_reason": FINISH.get(events[-1].finish_reason or "stop", "stop"),
            }
        )
    return {
        "id": f"cmpl-{rid}",
        "object": "text_completion",
        "created": int(time.time()),
        # The model that answered: a configured fallback's name when the router took it.
        "model": answers[0][-1].model or model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage_json([a[-1].usage or Usage() for a in answers], n),
    }


@router.post("/v1/completions", responses=route_docs.json_or_sse())
async def completions(
    request: Request, gw: Gw, key: Principal, body: Annotated[TextCompletionRequest, json_body(TextCompletionRequest)]
) -> Response:
    refuse_unsupported(body)
    if body.suffix:
        raise ApiError(ErrorCode.bad_request, "suffix (fill-in-the-middle) is not served")
    if body.echo and body.logprobs is not None:
        raise ApiError(ErrorCode.bad_request, "echo with logprobs is not served (prompt log probabilities)")
    model, _mode = resolve_model(gw.settings, body.model, "completion")
    assert model is not None
    prompts = [check_text(gw.settings, p, "prompt") for p in prompts_of(body)]
    if len(prompts) * body.n > MAX_ANSWERS:
        raise ApiError(ErrorCode.bad_request, f"prompts x n is {len(prompts) * body.n}; the limit is {MAX_ANSWERS}")
    asked = sampling(
        gw.settings,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens,
        seed=body.seed,
        stop=body.stop,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        logit_bias=body.logit_bias,
        logprobs=body.logprobs,
    )
    rid = request_id(request)
    runs: list[Run] = []
    try:
        for i, prompt in enumerate(prompts):
            for j in range(body.n):
                k = i * body.n + j
                runs.append(
                    await start_run(
                        gw,
                        request,
                        key,
                        api="openai",
                        route="POST /v1/completions",
                        text=prompt,
                        model=model,
                        prompt_mode="raw",
                        sampling=asked.model_copy(update={"seed": ((asked.seed or 0) + j) % (MAX_SEED + 1)}),
                        rid=None if k == 0 else f"{rid}-{k}",
                        priority=body.priority,
                    )
                )
    except ApiError:
        for r in runs:  # the answers already started are not wanted without the rest
            await gw.runs.cancel(r, "sibling_refused")
        raise
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await stream_response(
            gw, runs, request, TextChunkEncoder(rid, model, prompts, body.n, body.echo, include_usage)
        )
    answers = await whole_answers(gw, runs, request)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(completion_json(rid, model, prompts, body.n, body.echo, answers))
