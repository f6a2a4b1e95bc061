"""`POST /v1/messages`, compatible with the official Anthropic SDK: the router only (request.py reads the
body, encoder.py frames the answer, response.py documents the JSON body)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from switchyard.schemas import ErrorCode
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import (
    Gw,
    anthropic_thinking_ask,
    check_text,
    resolve_model,
    sampling,
    start_run,
)
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.messages.encoder import MessageEncoder, fold_message
from switchyard.services.gateway.messages.request import MessagesRequest, content_text, split_messages, take_prefill
from switchyard.services.gateway.messages.response import Message
from switchyard.services.gateway.messages.tools import pipeline_choice, tool_specs
from switchyard.services.gateway.params import refuse_unsupported
from switchyard.services.gateway.runs.relay import frames_of, stream_response, whole_answers
from switchyard.services.gateway.tool_calls import check_tool_grammars

router = APIRouter()


@router.post("/v1/messages", response_model=Message, responses=route_docs.json_or_sse())
async def messages(
    request: Request, gw: Gw, key: Principal, body: Annotated[MessagesRequest, json_body(MessagesRequest)]
) -> Response:
    refuse_unsupported(body)
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    thinking = anthropic_thinking_ask(body.thinking)
    messages, prefill = take_prefill(body.messages)
    if prefill is not None and thinking is not None and thinking.enabled:
        raise ApiError(ErrorCode.bad_request, "a final assistant message (a prefill) cannot be used with thinking")
    earlier, text = split_messages(messages)
    text = check_text(gw.settings, text, "the last user message")
    system = content_text(body.system) if body.system is not None else None
    tool_choice = pipeline_choice(body.tools, body.tool_choice)
    tool_names = {t.name for t in body.tools or []} if tool_choice != "none" else set()
    check_tool_grammars(
        [(f"tools[{i}].input_schema", t.input_schema) for i, t in enumerate(body.tools or [])], gw.settings.grammar
    )
    run = await start_run(
        gw,
        request,
        key,
        api="anthropic",
        route="POST /v1/messages",
        text=text,
        messages=earlier,
        system=system or None,
        model=model,
        mode=mode,
        sampling=sampling(
            gw.settings,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            max_tokens=body.max_tokens,
            stop=body.stop_sequences,
        ),
        client_tools=tool_specs(body.tools),
        tool_choice=tool_choice,
        thinking=thinking,
        prefill=prefill,
    )

    def encoder() -> MessageEncoder:
        return MessageEncoder(run.rid, model, tool_names, run.prompt_tokens)

    if body.stream:
        return await stream_response(gw, [run], request, encoder)
    answers = await whole_answers(gw, [run], request)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(fold_message(frames_of(encoder(), answers)))
