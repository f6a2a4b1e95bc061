"""Conversations: create, list (newest first, cursor pages), rename, delete, search.

`GET /v1/conversations/{id}` (the thread) lives in simple_chat/api.py. This router is included before it so
that `/v1/conversations/search` is not taken for a conversation id. Lists and search show the key's
own conversations (every one of the tenant's for a key without a user); reads by id are tenant-wide.
A chat id names a conversation within the key's tenant only: another tenant's use of the same id
changes nothing here.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from switchyard.schemas import (
    ConversationList,
    ConversationListQuery,
    ConversationQuery,
    ConversationRename,
    ConversationReply,
    ConversationSearch,
    ConversationSummary,
    DeleteAck,
    SearchReply,
    subjects,
)
from switchyard.schemas import subjects as subj
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.ids import CHAT_ID_PATTERN, ChatIdPath

router = APIRouter()


class CreateConversation(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", str_strip_whitespace=True)

    # Optional: a client that names its chats (the page does, to put the id in the URL at once).
    id: str | None = Field(None, pattern=CHAT_ID_PATTERN, alias="chatId")
    title: str | None = Field(None, min_length=1, max_length=200)


class RenameConversation(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    title: str = Field(min_length=1, max_length=200)


@router.post("/v1/conversations", status_code=201, response_model=ConversationSummary)
async def create(
    gw: Gw, key: Principal, body: Annotated[CreateConversation, json_body(CreateConversation, optional=True)]
) -> JSONResponse:
    chat_id = body.id or uuid.uuid4().hex
    missing = f"conversation {chat_id!r}"
    conv = await ask(
        gw,
        subjects.CONVERSATION_OPEN,
        ConversationQuery(tenant=key.tenant, chat_id=chat_id, user=key.user),
        ConversationReply,
        tenant=key.tenant,
        missing=missing,
    )
    summary = ConversationSummary(chat_id=conv.chat_id, title=conv.title, created_ms=conv.created_ms)
    if body.title:
        summary = await ask(
            gw,
            subj.CONVERSATIONS_RENAME,
            ConversationRename(tenant=key.tenant, chat_id=chat_id, title=body.title),
            ConversationSummary,
            tenant=key.tenant,
            missing=missing,
        )
    return JSONResponse(summary.model_dump(mode="json"), status_code=201)


@router.get("/v1/conversations", response_model=ConversationList)
async def list_conversations(
    gw: Gw,
    key: Principal,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> JSONResponse:
    page = await ask(
        gw,
        subj.CONVERSATIONS_LIST,
        ConversationListQuery(tenant=key.tenant, user=key.user, limit=limit, cursor=cursor or None),
        ConversationList,
        tenant=key.tenant,
        missing="conversations",
    )
    return JSONResponse(page.model_dump(mode="json"))


@router.get("/v1/conversations/search", response_model=SearchReply)
async def search(
    gw: Gw,
    key: Principal,
    q: Annotated[str, Query(min_length=1, max_length=200)],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> JSONResponse:
    reply = await ask(
        gw,
        subj.CONVERSATIONS_SEARCH,
        ConversationSearch(tenant=key.tenant, user=key.user, q=q, limit=limit),
        SearchReply,
        tenant=key.tenant,
        missing="conversations",
    )
    return JSONResponse(reply.model_dump(mode="json"))


@router.patch("/v1/conversations/{chat_id}", response_model=ConversationSummary)
async def rename(
    chat_id: ChatIdPath, gw: Gw, key: Principal, body: Annotated[RenameConversation, json_body(RenameConversation)]
) -> JSONResponse:
    summary = await ask(
        gw,
        subj.CONVERSATIONS_RENAME,
        ConversationRename(tenant=key.tenant, chat_id=chat_id, title=body.title),
        ConversationSummary,
        tenant=key.tenant,
        missing=f"conversation {chat_id!r}",
    )
    return JSONResponse(summary.model_dump(mode="json"))


@router.delete("/v1/conversations/{chat_id}", response_model=DeleteAck)
async def delete(chat_id: ChatIdPath, gw: Gw, key: Principal) -> JSONResponse:
    ack = await ask(
        gw,
        subj.CONVERSATIONS_DELETE,
        ConversationQuery(tenant=key.tenant, chat_id=chat_id, user=key.user),
        DeleteAck,
        tenant=key.tenant,
        missing=f"conversation {chat_id!r}",
    )
    return JSONResponse(ack.model_dump(mode="json"))
