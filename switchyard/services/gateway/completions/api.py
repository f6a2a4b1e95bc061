"""`POST /v1/completions`: OpenAI's legacy text completions, for any served model (base models included); the
router only (request.py, encoder.py, response.py).

The prompt is the whole prompt: it travels with `prompt_mode="raw"`, so the context stage passes it to the
engine verbatim (no chat template, history or system block) while input and output safety still run. Each
prompt times `n` is its own request through the pipeline (seed, seed+1, ...); choice `index` is
`prompt_index * n + j`, as OpenAI numbers them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from switchyard.schemas import ErrorCode
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.completions.encoder import TextChunkEncoder, completion_json
from switchyard.services.gateway.completions.request import (
    DEFAULT_MAX_TOKENS,
    MAX_ANSWERS,
    TextCompletionRequest,
    prompts_of,
)
from switchyard.services.gateway.completions.response import Completion
from switchyard.services.gateway.core import MAX_SEED, Gw, check_text, request_id, resolve_model, sampling, start_run
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import refuse_unsupported
from switchyard.services.gateway.runs.relay import stream_response, whole_answers
from switchyard.services.gateway.runs.run import Run

router = APIRouter()


@router.post("/v1/completions", response_model=Completion, responses=route_docs.json_or_sse())
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
            gw,
            runs,
            request,
            lambda: TextChunkEncoder(rid, model, prompts, body.n, body.echo, include_usage, runs[0].system_fingerprint),
        )
    answers = await whole_answers(gw, runs, request)
    if isinstance(answers, JSONResponse):
        return answers
    fingerprint = runs[0].system_fingerprint
    return JSONResponse(completion_json(rid, model, prompts, body.n, body.echo, answers, fingerprint))
