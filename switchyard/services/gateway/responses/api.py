"""`POST /v1/responses` (OpenAI's Responses API), and reading, deleting and cancelling a response.

A stored response (`store`, the default) is a turn of one of the tenant's conversations: the first response
of a chain opens a conversation whose chat id is that response's id, and a request with
`previous_response_id` continues the same conversation, so the pipeline's own history (trimmed to the
prompt budget like any chat) is the chain's context, and the chain shows in the console as a conversation.
A response id names both: `resp_<rid>` for a chain's first response, `resp_<first rid>_<rid>` after it.

Every body here is the fold of the response's own stream events (encoder.py): the stream, the
non-streaming body, a background response read back and a stored one read back come from one encoder.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from switchyard.schemas import (
    ChatEvent,
    ConversationQuery,
    ConversationReply,
    DeleteAck,
    ErrorCode,
    ErrorInfo,
    Turn,
    TurnDelete,
    subjects,
)
from switchyard.schemas import subjects as subj
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import (
    Gateway,
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
from switchyard.services.gateway.responses.encoder import ResponseEncoder
from switchyard.services.gateway.responses.request import RESPONSE_ID_PATTERN, ResponsesRequest, read_input
from switchyard.services.gateway.runs.relay import stream_response, whole_answers
from switchyard.services.gateway.runs.run import Run
from switchyard.services.gateway.tool_calls import check_tool_grammars, choice_of, specs

router = APIRouter()

ResponseIdPath = Annotated[
    str, Path(pattern=RESPONSE_ID_PATTERN, description="a response id (`resp_...`)", max_length=70)
]
# Responses this gateway started, by rid: what was asked (echoed in the response) and the function names,
# for reading one back while it runs (background) and a while after.
KEPT = 1024
STATUS_OF_TURN = {"complete": "stop", "stopped": "cancelled"}


def chain_ids(response_id: str) -> tuple[str, str]:
    """(the conversation's chat id, the rid of the request that made the response)."""
    parts = response_id.removeprefix("resp_").split("_")
    return f"resp_{parts[0]}", parts[-1]


class Kept:
    def __init__(self) -> None:
        self.by_rid: OrderedDict[str, tuple[dict[str, Any], set[str]]] = OrderedDict()

    def put(self, rid: str, template: dict[str, Any], tool_names: set[str]) -> None:
        self.by_rid[rid] = (template, tool_names)
        while len(self.by_rid) > KEPT:
            self.by_rid.popitem(last=False)


def kept(request: Request) -> Kept:
    state = request.app.state
    if not hasattr(state, "responses_kept"):
        state.responses_kept = Kept()
    k: Kept = state.responses_kept
    return k


def _local(gw: Gateway, request: Request, response_id: str, tenant: str) -> tuple[Run, ResponseEncoder] | None:
    """The run of a response still in progress on this gateway (another tenant's is absent), with a fresh
    encoder. A finished one is read from the store, where its turn was saved before its last event."""
    _, rid = chain_ids(response_id)
    run = gw.runs.by_rid.get(rid)
    entry = kept(request).by_rid.get(rid)
    if run is None or entry is None or run.tenant != tenant or entry[0]["id"] != response_id or not run.live:
        return None
    return run, ResponseEncoder(entry[0], entry[1])


def folded(encoder: ResponseEncoder, events: list[ChatEvent]) -> dict[str, Any]:
    encoder.begin()
    for e in events:
        encoder.on(e)
    return encoder.body()


def template_of(
    response_id: str, body: ResponsesRequest, temperature: float, top_p: float, tool_choice: Any
) -> dict[str, Any]:
    """The response as created: every parameter the client gave (or its default) echoed, no output yet."""
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "background": body.background,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "model": body.model,
        "output": [],
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": body.store,
        "temperature": temperature,
        "top_p": top_p,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        "tool_choice": tool_choice,
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "truncation": "disabled",
        "usage": None,
    }


def _stored_template(response_id: str, turn: Turn, model: str) -> dict[str, Any]:
    # What the request asked is in its logged record, not the conversation: the defaults are shown.
    return {
        "id": response_id,
        "object": "response",
        "created_at": turn.created_ms // 1000,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "model": turn.model or model,
        "output": [],
        "parallel_tool_calls": True,  # every call the stored answer made
        "store": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }


def turn_events(turn: Turn) -> list[ChatEvent]:
    """A stored turn as the events that made it, so reading it back is the same fold."""
    rid = turn.rid
    events = [ChatEvent(rid=rid, type="tool", tool=t) for t in turn.tools]
    if turn.thinking:
        events.append(ChatEvent(rid=rid, type="thinking", text=turn.thinking))
    if turn.answer:
        events.append(ChatEvent(rid=rid, type="delta", text=turn.answer))
    finish = STATUS_OF_TURN.get(turn.status)
    if finish == "stop" and turn.finish_reason:
        finish = turn.finish_reason  # 'length' reads back as incomplete, as it streamed
    if finish is None:
        info = ErrorInfo.of(ErrorCode.internal, "the response ended in an error")
        events.append(ChatEvent(rid=rid, type="error", error=info, usage=turn.usage))
    else:
        events.append(ChatEvent(rid=rid, type="done", finish_reason=finish, usage=turn.usage))  # type: ignore[arg-type]
    return events


def _call_names(text: str) -> set[str]:
    # A stored answer that is a function call names its function; the request's tool list is not stored.
    return set(re.findall(r'"name":\s*"([A-Za-z0-9_-]{1,64})"', text))


async def _stored(gw: Gateway, tenant: str, user: str, response_id: str) -> tuple[ConversationReply, Turn]:
    chat_id, rid = chain_ids(response_id)
    missing = f"response {response_id!r}"
    conv = await ask(
        gw,
        subjects.CONVERSATION_GET,
        ConversationQuery(tenant=tenant, chat_id=chat_id, user=user),
        ConversationReply,
        tenant=tenant,
        missing=missing,
    )
    for turn in conv.turns:
        if turn.rid == rid:
            return conv, turn
    raise ApiError(ErrorCode.not_found, f"{missing} not found")


async def _chain(gw: Gateway, request: Request, tenant: str, user: str, previous: str) -> str:
    """The conversation a response continues; its previous response must be its conversation's latest."""
    if _local(gw, request, previous, tenant) is not None:
        raise ApiError(ErrorCode.bad_request, f"previous_response_id {previous!r} is still in progress")
    conv, turn = await _stored(gw, tenant, user, previous)
    if conv.turns[-1].rid != turn.rid:
        raise ApiError(
            ErrorCode.bad_request,
            f"previous_response_id {previous!r} is not the latest response of its chain; "
            "branching from an earlier response is not served",
        )
    return conv.chat_id


@router.post("/v1/responses", responses=route_docs.json_or_sse())
async def create_response(
    request: Request, gw: Gw, key: Principal, body: Annotated[ResponsesRequest, json_body(ResponsesRequest)]
) -> Response:
    refuse_unsupported(body)
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    thinking = effort_ask(body.reasoning.effort if body.reasoning is not None else None)
    if body.background and (body.stream or not body.store):
        raise ApiError(ErrorCode.bad_request, "background responses need store: true and are not streamed")
    system, earlier, text = read_input(body.input)
    instructions = "\n\n".join(s for s in (body.instructions, system) if s) or None
    tools = body.tool_defs()
    tool_choice = choice_of(tools, body.named_choice())
    tool_names = {t.function.name for t in tools or []} if tool_choice != "none" else set()
    check_tool_grammars(
        [(f"tools[{i}].parameters", t.function.parameters) for i, t in enumerate(tools or [])], gw.settings.grammar
    )
    check_text(gw.settings, text, "the input's last message")
    fmt = body.text.format if body.text is not None else None
    asked = sampling(
        gw.settings,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=body.max_output_tokens,
        response_format=response_format_of(fmt.as_response_format() if fmt else None, None, gw.settings.grammar),
    )
    rid = request_id(request)
    chat_id: str | None = None
    if body.previous_response_id is not None:
        chat_id = await _chain(gw, request, key.tenant, key.user, body.previous_response_id)
        response_id = f"{chat_id}_{rid}"
    else:
        response_id = f"resp_{rid}"
        chat_id = response_id if body.store else None
    choice = body.tool_choice
    echoed = choice.model_dump() if choice is not None and not isinstance(choice, str) else choice or "auto"
    template = template_of(response_id, body, asked.temperature, asked.top_p, echoed)
    run = await start_run(
        gw,
        request,
        key,
        api="openai",
        route="POST /v1/responses",
        text=text,
        chat_id=chat_id,
        messages=earlier,
        system=instructions,
        model=model,
        mode=mode,
        sampling=asked,
        client_tools=specs(tools),
        tool_choice=tool_choice,
        persist=body.store,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        thinking=thinking,
    )
    kept(request).put(rid, template, tool_names)
    encoder = ResponseEncoder(template, tool_names)
    if body.background:
        # Nobody reads it: it runs to its end (or a cancel), and is read back by id.
        return JSONResponse(folded(encoder, []))
    if body.stream:
        return await stream_response(gw, [run], request, encoder)
    answers = await whole_answers(gw, [run], request)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(folded(encoder, answers[0]))


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: ResponseIdPath, request: Request, gw: Gw, key: Principal) -> JSONResponse:
    local = _local(gw, request, response_id, key.tenant)
    if local is not None:
        run, encoder = local
        return JSONResponse(folded(encoder, list(run.events)))
    _, turn = await _stored(gw, key.tenant, key.user, response_id)
    template = _stored_template(response_id, turn, gw.settings.models[0])
    return JSONResponse(folded(ResponseEncoder(template, _call_names(turn.answer)), turn_events(turn)))


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: bool


@router.delete("/v1/responses/{response_id}", response_model=ResponseDeleted)
async def delete_response(response_id: ResponseIdPath, gw: Gw, key: Principal) -> JSONResponse:
    chat_id, rid = chain_ids(response_id)
    await ask(
        gw,
        subj.TURN_DELETE,
        TurnDelete(tenant=key.tenant, chat_id=chat_id, rid=rid),
        DeleteAck,
        tenant=key.tenant,
        missing=f"response {response_id!r}",
    )
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: ResponseIdPath, request: Request, gw: Gw, key: Principal) -> JSONResponse:
    """Stop a response still running on this gateway (a background one, or a stream): the answer so far is
    kept, and the response is `cancelled`. A finished response cannot be cancelled."""
    local = _local(gw, request, response_id, key.tenant)
    if local is None:
        await _stored(gw, key.tenant, key.user, response_id)  # 404 when there is no such response
        raise ApiError(ErrorCode.bad_request, f"response {response_id!r} is not in progress: it cannot be cancelled")
    run, encoder = local
    await gw.runs.cancel(run, "stopped")
    # The pipeline answers a cancel with its last event, or the gateway ends the run after cancel_wait_s.
    async for _ in run.follow():
        pass
    return JSONResponse(folded(encoder, list(run.events)))
