"""`POST /v1/chat/completions`, compatible with the official OpenAI SDK (streaming and not): the router only
(request.py reads the body, encoder.py frames the answers, response.py documents the JSON body)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.chat_completions.encoder import ChunkEncoder, fold_chunks
from switchyard.services.gateway.chat_completions.request import (
    CompletionRequest,
    logprobs_of,
    split_messages,
    take_prefill,
)
from switchyard.services.gateway.chat_completions.response import ChatCompletion
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
from switchyard.services.gateway.params import refuse_unsupported
from switchyard.services.gateway.response_format import response_format_of
from switchyard.services.gateway.runs.relay import frames_of, stream_response, whole_answers
from switchyard.services.gateway.runs.run import Run
from switchyard.services.gateway.tool_calls import check_tool_grammars, choice_of, specs

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=route_docs.json_or_sse())
async def chat_completions(
    request: Request, gw: Gw, key: Principal, body: Annotated[CompletionRequest, json_body(CompletionRequest)]
) -> Response:
    refuse_unsupported(body)
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    thinking = effort_ask(body.reasoning_effort)
    messages, prefill, generation_prompt = take_prefill(
        body.messages, body.continue_final_message, body.add_generation_prompt
    )
    system, earlier, text = split_messages(messages)
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
                    prefill=prefill,
                    add_generation_prompt=generation_prompt,
                )
            )
    except ApiError:
        for r in runs:  # the answers already started are not wanted without the rest
            await gw.runs.cancel(r, "sibling_refused")
        raise
    run = runs[0]

    def encoder(include_usage: bool) -> ChunkEncoder:
        return ChunkEncoder(run.rid, model, include_usage, len(runs), tool_names, max_calls, run.system_fingerprint)

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await stream_response(gw, runs, request, lambda: encoder(include_usage), keep_blocked=True)
    answers = await whole_answers(gw, runs, request, keep_blocked=True)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(fold_chunks(frames_of(encoder(True), answers)))
