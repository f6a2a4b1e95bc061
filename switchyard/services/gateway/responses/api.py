"""`POST /v1/responses` (OpenAI's Responses API, the Open Responses specification), compacting a conversation,
and reading, deleting and cancelling a response; WebSocket mode (`GET /v1/responses` with an Upgrade) is
socket.py.

Every body here is the fold of the response's own stream events (encoder.py): the stream, the
non-streaming body, a background response read back and a stored one read back come from one encoder.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from switchyard.schemas import ChatMessage, DeleteAck, ErrorCode, TurnDelete, subjects
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gw, request_id, resolve_model, sampling, start_run
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import refuse_unsupported
from switchyard.services.gateway.responses import compaction
from switchyard.services.gateway.responses.create import (
    chain_ids,
    folded,
    kept,
    local_run,
    previous_of,
    start_response,
    stored,
    stored_body,
)
from switchyard.services.gateway.responses.encoder import usage_json
from switchyard.services.gateway.responses.models import CompactionObject, ResponseDeleted, ResponseObject
from switchyard.services.gateway.responses.request import (
    RESPONSE_ID_PATTERN,
    CompactRequest,
    ResponsesRequest,
    read_items,
    refuse_media,
)
from switchyard.services.gateway.responses.socket_mode import responses_socket
from switchyard.services.gateway.runs.relay import stream_response, whole_answers

router = APIRouter()
router.add_api_websocket_route("/v1/responses", responses_socket)

ResponseIdPath = Annotated[
    str, Path(pattern=RESPONSE_ID_PATTERN, description="a response id (`resp_...`)", max_length=70)
]


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    responses=route_docs.json_or_sse("the response, or with `stream: true` its events (then `[DONE]`)"),
)
async def create_response(
    request: Request, gw: Gw, key: Principal, body: Annotated[ResponsesRequest, json_body(ResponsesRequest)]
) -> Response:
    started = await start_response(gw, request, key, body, request_id(request), route="POST /v1/responses")
    if body.background:
        # Nobody reads it: it runs to its end (or a cancel), and is read back by id.
        return JSONResponse(folded(started.encoder, []))
    if body.stream:
        return await stream_response(gw, [started.run], request, started.encoder)
    answers = await whole_answers(gw, [started.run], request)
    if isinstance(answers, JSONResponse):
        return answers
    return JSONResponse(folded(started.encoder, answers[0]))


async def _chain_history(request: Request, gw: Gw, key: Principal, previous: str) -> list[ChatMessage]:
    """The stored conversation up to and including `previous`, as messages."""
    conv, last = await previous_of(gw, request, key, previous)
    history: list[ChatMessage] = []
    for turn in conv.turns:
        history += [
            ChatMessage(role="user", content=turn.user_text),
            ChatMessage(role="assistant", content=turn.answer),
        ]
        if turn.rid == last.rid:
            break
    return history


@router.post("/v1/responses/compact", response_model=CompactionObject)
async def compact_response(
    request: Request, gw: Gw, key: Principal, body: Annotated[CompactRequest, json_body(CompactRequest)]
) -> JSONResponse:
    """A conversation (the input, after the stored chain `previous_response_id` ends with) compacted: the user's
    messages as they were and one `compaction` item for the rest, which the model summarises. Send the output
    as the base `input` of a new response (no `previous_response_id`), then the next user message."""
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    refuse_media(body.input, model)
    refuse_unsupported(body)
    history = await _chain_history(request, gw, key, body.previous_response_id) if body.previous_response_id else []
    system: str | None = None
    if isinstance(body.input, str):
        history.append(ChatMessage(role="user", content=body.input))
    elif body.input:
        system, messages = read_items(body.input)
        history += messages
    history = [m for m in history if m.content]
    if not history:
        raise ApiError(ErrorCode.bad_request, "nothing to compact: give input or previous_response_id")
    instructions = "\n\n".join(s for s in (body.instructions, system) if s) or None
    rid = request_id(request)
    run = await start_run(
        gw,
        request,
        key,
        api="openai",
        route="POST /v1/responses/compact",
        text=compaction.SUMMARY_REQUEST,
        messages=history,
        system=instructions,
        model=model,
        mode=mode,
        sampling=sampling(gw.settings),
        persist=False,
    )
    answers = await whole_answers(gw, [run], request)
    if isinstance(answers, JSONResponse):
        return answers
    events = answers[0]
    summary = "".join(e.text for e in events if e.type == "delta").strip()
    done = events[-1]
    users = [m.content for m in history if m.role == "user"]
    output: list[dict[str, object]] = [
        {
            "id": f"msg_{rid}_{i}",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_text", "text": text}],
        }
        for i, text in enumerate(users)
    ]
    output.append({"id": f"cmp_{rid}", "type": "compaction", "encrypted_content": compaction.encode(summary)})
    usage = usage_json(done.usage) if done.usage is not None else usage_json(run.usage)
    body_out = {
        "id": f"resp_{rid}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage,
    }
    return JSONResponse(body_out)


@router.get("/v1/responses/{response_id}", response_model=ResponseObject)
async def get_response(response_id: ResponseIdPath, request: Request, gw: Gw, key: Principal) -> JSONResponse:
    if response_id in kept(request).deleted:
        raise ApiError(ErrorCode.not_found, f"response {response_id!r} not found")
    local = local_run(gw, request, response_id, key.tenant)
    if local is not None:
        run, encoder = local
        return JSONResponse(folded(encoder, list(run.events)))
    _, turn = await stored(gw, key.tenant, key.user, response_id)
    return JSONResponse(stored_body(response_id, turn, gw.settings))


async def _delete_turn(gw: Gw, tenant: str, response_id: str) -> None:
    chat_id, rid = chain_ids(response_id)
    await ask(
        gw,
        subjects.TURN_DELETE,
        TurnDelete(tenant=tenant, chat_id=chat_id, rid=rid),
        DeleteAck,
        tenant=tenant,
        missing=f"response {response_id!r}",
    )


@router.delete("/v1/responses/{response_id}", response_model=ResponseDeleted)
async def delete_response(response_id: ResponseIdPath, request: Request, gw: Gw, key: Principal) -> JSONResponse:
    """Delete a response. One still running on this gateway is cancelled first, then deleted with whatever it
    had written; it is gone at once (a later GET is 404) and stays gone."""
    if response_id in kept(request).deleted:
        raise ApiError(ErrorCode.not_found, f"response {response_id!r} not found")
    local = local_run(gw, request, response_id, key.tenant)
    if local is None:
        await _delete_turn(gw, key.tenant, response_id)
    else:
        run, _ = local
        kept(request).delete(response_id)
        await gw.runs.cancel(run, "stopped")
        # The pipeline saves a cancelled answer before its last event: once that has come, delete the turn.
        async for _ in run.follow():
            pass
        if run.work is not None and run.work.persist:
            try:
                await _delete_turn(gw, key.tenant, response_id)
            except ApiError as e:
                if e.code != ErrorCode.not_found:  # not saved at all (it ended in an error) is as good
                    raise
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel", response_model=ResponseObject)
async def cancel_response(response_id: ResponseIdPath, request: Request, gw: Gw, key: Principal) -> JSONResponse:
    """Stop a response still running on this gateway (a background one, or a stream): the answer so far is
    kept, and the response is `cancelled`. A finished response cannot be cancelled."""
    if response_id in kept(request).deleted:
        raise ApiError(ErrorCode.not_found, f"response {response_id!r} not found")
    local = local_run(gw, request, response_id, key.tenant)
    if local is None:
        await stored(gw, key.tenant, key.user, response_id)  # 404 when there is no such response
        raise ApiError(ErrorCode.bad_request, f"response {response_id!r} is not in progress: it cannot be cancelled")
    run, encoder = local
    await gw.runs.cancel(run, "stopped")
    # The pipeline answers a cancel with its last event, or the gateway ends the run after cancel_wait_s.
    async for _ in run.follow():
        pass
    return JSONResponse(folded(encoder, list(run.events)))
