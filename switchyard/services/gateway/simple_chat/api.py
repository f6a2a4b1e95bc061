"""The simple protocol's routes: `POST /chat` streams SSE (request.py, encoder.py); a conversation; resuming and
stopping a stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from switchyard.schemas import CancelNotice, ChatEvent, ConversationQuery, ConversationReply, ErrorCode, subjects
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw, check_text, resolve_model, sampling, start_run
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import ChatIdPath, RidPath
from switchyard.services.gateway.product.chat_files import attach_files
from switchyard.services.gateway.runs.relay import Batch, Item, follow, sse_response
from switchyard.services.gateway.runs.resume import PastTheEnd, kept_events, owned, resume_position
from switchyard.services.gateway.runs.run import Phase, Run
from switchyard.services.gateway.simple_chat.encoder import ChatEncoder
from switchyard.services.gateway.simple_chat.request import ChatRequest

router = APIRouter()


@router.post("/chat", response_class=EventSourceResponse, responses=route_docs.sse())
async def chat(
    request: Request, gw: Gw, key: Principal, body: Annotated[ChatRequest, json_body(ChatRequest)]
) -> Response:
    text = check_text(gw.settings, body.text)
    model, mode = resolve_model(gw.settings, body.model)
    if body.file_ids:
        await attach_files(gw, key, body.chat_id, body.file_ids)
    run = await start_run(
        gw,
        request,
        key,
        api="chat",
        route="POST /chat",
        text=text,
        chat_id=body.chat_id,
        model=model,
        mode=body.mode or mode,
        sampling=sampling(
            gw.settings,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=body.top_k,
            max_tokens=body.max_tokens,
            seed=body.seed,
            stop=body.stop,
        ),
    )
    return sse_response(gw, follow(gw, [run]), ChatEncoder())


NOT_KEPT = "stream {rid!r} not found (or no longer kept)"


def _local_run(gw: Gateway, rid: str, tenant: str) -> Run | None:
    """This replica's copy of the stream; another tenant's is treated as absent."""
    run = gw.runs.by_rid.get(rid)
    if run is not None and run.tenant != tenant:
        raise ApiError(ErrorCode.not_found, NOT_KEPT.format(rid=rid))
    return run


async def follow_kept(
    rid: str, first: Item | None, rest: AsyncIterator[tuple[int, ChatEvent] | None], after: int
) -> AsyncIterator[Batch]:
    """A stream another replica relays, from JetStream; leaving does not cancel it (its owner decides)."""
    if first is not None:
        yield [first]
    try:
        async for item in rest:
            if item is not None:  # quiet: sse-starlette keeps the line alive
                yield [(0, *item)]
    except PastTheEnd as e:
        # Only a live stream that ends before the named id gets here: the status line has gone out.
        yield [(0, after + 1, ChatEvent(rid=rid, type="error", error=e.info()))]


async def kept_from(gw: Gateway, rid: str, after: int) -> AsyncIterator[Batch]:
    """The kept stream after `after`, its first event (or first quiet moment) read before the status line, so
    an id past the end of a finished stream is a 400 rather than an empty stream."""
    timeout = gw.settings.request_timeout_s + gw.settings.cancel_wait_s
    events = kept_events(gw.bus, rid, after, gw.settings.keepalive_s, timeout)
    first: Item | None = None
    try:
        got = await anext(events)
    except StopAsyncIteration:
        got = None
    except PastTheEnd:
        await events.aclose()
        raise
    if got is not None:
        first = (0, *got)
    return follow_kept(rid, first, events, after)


@router.get("/v1/streams/{rid}", response_class=EventSourceResponse, responses=route_docs.sse())
async def resume(
    rid: RidPath,
    gw: Gw,
    key: Principal,
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    """Reconnect to a stream: the events after `Last-Event-ID` (or `?after=`), then the rest live. An id that is
    not an integer from -1, or is past the stream's last event, is a 400."""
    position = resume_position(last_event_id, after)
    run = _local_run(gw, rid, key.tenant)
    if run is not None:
        # This replica numbered the run's events: it never gave out an id past its last.
        last = len(run.events) - 1
        if position > last:
            raise PastTheEnd(position, last, finished=run.phase in (Phase.ended, Phase.closed))
        items = follow(gw, [run], position)
    elif gw.settings.resume_stream:
        await owned(gw.bus, rid, key.tenant)
        items = await kept_from(gw, rid, position)
    else:
        raise ApiError(ErrorCode.not_found, NOT_KEPT.format(rid=rid))
    return sse_response(gw, items, ChatEncoder())


class Cancelling(BaseModel):
    """The 202 of a Stop: the run is told to stop; its stream ends with the partial text."""

    rid: str
    status: Literal["cancelling"]


@router.post("/v1/streams/{rid}/cancel", status_code=202, response_model=Cancelling)
async def stop(rid: RidPath, gw: Gw, key: Principal) -> JSONResponse:
    """The Stop button: inference frees the sequence; readers get the final event with the partial text."""
    run = _local_run(gw, rid, key.tenant)
    if run is not None:
        await gw.runs.cancel(run, "stopped")
        return JSONResponse(
            {"rid": rid, "status": "finished" if run.phase is Phase.closed else "cancelling"}, status_code=202
        )
    if not gw.settings.resume_stream:
        raise ApiError(ErrorCode.not_found, NOT_KEPT.format(rid=rid))
    # Relayed by another replica: the cancel reaches inference (and that replica's reader) through the bus.
    await owned(gw.bus, rid, key.tenant)
    await gw.bus.publish(subjects.chat_cancel(rid), CancelNotice(rid=rid, reason="stopped"), rid=rid, tenant=key.tenant)
    return JSONResponse({"rid": rid, "status": "cancelling"}, status_code=202)


@router.get("/v1/conversations/{chat_id}", response_model=ConversationReply)
async def conversation(chat_id: ChatIdPath, gw: Gw, key: Principal) -> JSONResponse:
    reply = await ask(
        gw,
        subjects.CONVERSATION_GET,
        ConversationQuery(tenant=key.tenant, chat_id=chat_id, user=key.user),
        ConversationReply,
        tenant=key.tenant,
        missing=f"conversation {chat_id!r}",
    )
    return JSONResponse(reply.model_dump(mode="json"))
