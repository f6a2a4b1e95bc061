"""Conversation, memory, file and instruction requests answered by the context service.

Every query carries the tenant the gateway authenticated; the context service scopes every read and
write by it, and answers `not_found` for anything that belongs to another tenant (never `forbidden`,
which would reveal that the id exists).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConversationSummary(BaseModel):
    chat_id: str
    title: str | None = None
    created_ms: int = 0
    updated_ms: int = 0
    turns: int = 0


class ConversationListQuery(BaseModel):
    tenant: str
    # Empty: every conversation of the tenant; else only this user's.
    user: str = ""
    limit: int = Field(20, ge=1, le=200)
    # Opaque; the `next_cursor` of the previous page.
    cursor: str | None = None


class ConversationList(BaseModel):
    items: list[ConversationSummary] = Field(default_factory=list)
    next_cursor: str | None = None


class ConversationRename(BaseModel):
    tenant: str
    chat_id: str
    title: str = Field(min_length=1, max_length=200)


class ConversationSearch(BaseModel):
    tenant: str
    user: str = ""
    q: str = Field(min_length=1, max_length=200)
    limit: int = Field(20, ge=1, le=100)


class SearchHit(BaseModel):
    chat_id: str
    title: str | None = None
    turn_id: str | None = None
    snippet: str = ""
    created_ms: int = 0


class SearchReply(BaseModel):
    hits: list[SearchHit] = Field(default_factory=list)


class TurnDelete(BaseModel):
    """One turn of a tenant's conversation, named by the request that made it (a stored Responses API
    response); a conversation left without turns goes with it."""

    tenant: str
    chat_id: str
    rid: str


class DeleteAck(BaseModel):
    id: str
    deleted: bool = True


class MemoryItem(BaseModel):
    id: str
    text: str
    created_ms: int = 0
    # The request that saved it ("remember that ..."), empty when added through the API.
    source_rid: str = ""


class MemoryQuery(BaseModel):
    tenant: str
    user: str


class MemoryAdd(BaseModel):
    tenant: str
    user: str
    text: str = Field(min_length=1, max_length=2000)


class MemoryDelete(BaseModel):
    tenant: str
    user: str
    id: str


class MemoryList(BaseModel):
    items: list[MemoryItem] = Field(default_factory=list)


class FileInfo(BaseModel):
    id: str
    name: str
    media_type: str = "text/plain"
    chars: int = 0
    # Attached to one conversation (its text joins that chat's prompt), or None: the user's library.
    chat_id: str | None = None
    created_ms: int = 0


class FileUpload(BaseModel):
    tenant: str
    user: str
    name: str = Field(min_length=1, max_length=255)
    media_type: str = "text/plain"
    text: str
    chat_id: str | None = None


class FileQuery(BaseModel):
    tenant: str
    id: str


class FileListQuery(BaseModel):
    tenant: str
    user: str = ""
    chat_id: str | None = None


class FileList(BaseModel):
    items: list[FileInfo] = Field(default_factory=list)


class FileContent(BaseModel):
    info: FileInfo
    text: str


class InstructionsQuery(BaseModel):
    tenant: str


class Instructions(BaseModel):
    """A tenant's standing instructions, rendered into every prompt's system block."""

    tenant: str
    text: str = Field("", max_length=20000)
    updated_ms: int = 0
