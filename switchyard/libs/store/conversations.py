"""Conversations and their turns.

A client's chat id names a conversation within its tenant only: two tenants can each have a chat
"demo", and nothing here answers differently for an id because another tenant uses it. A row's key
(`conversations.id`, what turns point at) is therefore not the chat id: newer rows get a random key;
rows written before chat ids were scoped keep their chat id as key, and `init` copies it into `chat_id`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from switchyard.libs.store.db import add_missing_columns, create_all
from switchyard.libs.store.sql import decode_cursor, encode_cursor, insert_ignore, like_pattern, now_ms
from switchyard.schemas import ConversationSummary, SearchHit, ToolEvent, Turn, Usage

metadata = MetaData()

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(), primary_key=True),
    Column("tenant", String(), nullable=False),
    # NULL only in rows an older version wrote, until `init` fills it in.
    Column("chat_id", String()),
    Column("user", String(), nullable=False, default=""),
    Column("title", String()),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_conversations_tenant_updated", "tenant", "updated_ms"),
    Index("ux_conversations_tenant_chat", "tenant", "chat_id", unique=True),
)

turns = Table(
    "turns",
    metadata,
    # Insertion order is the thread's order; timestamps can tie within a millisecond.
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(), nullable=False, unique=True),
    Column("conversation_id", String(), ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False),
    Column("rid", String(), nullable=False, unique=True),
    Column("user_text", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("usage", JSON, nullable=False),
    Column("model", String()),
    Column("created_ms", BigInteger, nullable=False),
    # Added later (NULL in rows an older version wrote): tool steps, their prompt block, thinking, and
    # why the answer ended.
    Column("tools", JSON),
    Column("tool_prompt", Text),
    Column("thinking", Text),
    Column("finish_reason", String(32)),
    Index("ix_turns_conversation", "conversation_id", "seq"),
)

TITLE_CHARS = 60


def title_from(answer: str, user_text: str) -> str | None:
    """A short title: the first line of the first answer (the user's text when the answer is empty)."""
    for source in (answer, user_text):
        for line in source.splitlines():
            line = re.sub(r"^[#>*\-\s`]+|[*_`]+", "", line).strip()
            if line:
                if len(line) <= TITLE_CHARS:
                    return line
                cut = line[:TITLE_CHARS].rsplit(" ", 1)[0]
                return cut.rstrip(" ,.;:") + "…"
    return None


@dataclass
class Conversation:
    id: str  # the client's chat id
    tenant: str
    user: str
    title: str | None
    created_ms: int
    updated_ms: int
    key: str  # the row's key, what its turns point at


def _conv(row: Any) -> Conversation:
    m = row._mapping
    return Conversation(m["chat_id"], m["tenant"], m["user"], m["title"], m["created_ms"], m["updated_ms"], m["id"])


def _turn(row: Any) -> Turn:
    m = row._mapping
    return Turn(
        id=m["id"],
        rid=m["rid"],
        user_text=m["user_text"],
        answer=m["answer"],
        status=m["status"],
        usage=Usage.model_validate(m["usage"] or {}),
        model=m["model"],
        created_ms=m["created_ms"],
        tools=[ToolEvent.model_validate(t) for t in m["tools"] or []],
        tool_prompt=m["tool_prompt"] or "",
        thinking=m["thinking"] or "",
        finish_reason=m["finish_reason"],
    )


def scope_chat_ids(sync_conn: Any) -> None:
    """Rows from before chat ids were scoped by tenant: their key was the chat id, and stays their key
    (their turns point at it). Copy it into `chat_id`, then make (tenant, chat_id) unique, which a
    database created by an older version lacks (create_all adds no index to an existing table)."""
    sync_conn.execute(update(conversations).where(conversations.c.chat_id.is_(None)).values(chat_id=conversations.c.id))
    for index in conversations.indexes:
        if index.name == "ux_conversations_tenant_chat":
            index.create(sync_conn, checkfirst=True)


class ConversationStore:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    async def init(self) -> None:
        await create_all(self.engine, metadata)
        async with self.engine.begin() as conn:
            await conn.run_sync(add_missing_columns, conversations)
            await conn.run_sync(add_missing_columns, turns)
            await conn.run_sync(scope_chat_ids)

    # ---- conversations ---------------------------------------------------------------------

    async def _find(self, conn: AsyncConnection, tenant: str, chat_id: str) -> Conversation | None:
        c = conversations.c
        row = (await conn.execute(select(conversations).where(c.tenant == tenant, c.chat_id == chat_id))).first()
        return None if row is None else _conv(row)

    async def _open(self, conn: AsyncConnection, tenant: str, chat_id: str, user: str) -> Conversation:
        now = now_ms()
        await conn.execute(
            insert_ignore(conn, conversations, ["tenant", "chat_id"]).values(
                id=uuid.uuid4().hex,
                tenant=tenant,
                chat_id=chat_id,
                user=user,
                title=None,
                created_ms=now,
                updated_ms=now,
            )
        )
        conv = await self._find(conn, tenant, chat_id)
        assert conv is not None  # inserted, or there already
        return conv

    async def open(self, tenant: str, chat_id: str, user: str = "") -> Conversation:
        """The tenant's conversation, created when absent."""
        async with self.engine.begin() as conn:
            return await self._open(conn, tenant, chat_id, user)

    async def get(self, tenant: str, chat_id: str) -> Conversation | None:
        async with self.engine.connect() as conn:
            return await self._find(conn, tenant, chat_id)

    async def turns(
        self, tenant: str, chat_id: str, statuses: tuple[str, ...] | None = None
    ) -> tuple[Conversation, list[Turn]] | None:
        """The conversation and its turns, oldest first (only `statuses` when given); None when the
        tenant has no such conversation."""
        async with self.engine.connect() as conn:
            conv = await self._find(conn, tenant, chat_id)
            if conv is None:
                return None
            q = select(turns).where(turns.c.conversation_id == conv.key).order_by(turns.c.seq)
            if statuses is not None:
                q = q.where(turns.c.status.in_(statuses))
            return conv, [_turn(r) for r in (await conn.execute(q)).all()]

    async def history(self, tenant: str, chat_id: str, statuses: tuple[str, ...]) -> list[Turn]:
        """Turns for a prompt, oldest first: [] for a conversation not created yet."""
        c = conversations.c
        q = (
            select(turns)
            .join(conversations, turns.c.conversation_id == c.id)
            .where(c.tenant == tenant, c.chat_id == chat_id, turns.c.status.in_(statuses))
            .order_by(turns.c.seq)
        )
        async with self.engine.connect() as conn:
            return [_turn(r) for r in (await conn.execute(q)).all()]

    async def save_turn(self, tenant: str, user: str, chat_id: str, turn: Turn) -> tuple[str, bool]:
        """Store a finished turn; (turn id, whether it is new). Idempotent on the turn's rid.

        Creates the conversation when absent and titles it from its first answer.
        """
        async with self.engine.begin() as conn:
            conv = await self._open(conn, tenant, chat_id, user)
            existing = (await conn.execute(select(turns.c.id).where(turns.c.rid == turn.rid))).first()
            if existing is not None:
                return str(existing[0]), False
            turn_id = turn.id or uuid.uuid4().hex
            created = turn.created_ms or now_ms()
            await conn.execute(
                insert_ignore(conn, turns, ["rid"]).values(
                    id=turn_id,
                    conversation_id=conv.key,
                    rid=turn.rid,
                    user_text=turn.user_text,
                    answer=turn.answer,
                    status=turn.status,
                    usage=turn.usage.model_dump(),
                    model=turn.model,
                    created_ms=created,
                    tools=[t.model_dump() for t in turn.tools],
                    tool_prompt=turn.tool_prompt,
                    thinking=turn.thinking,
                    finish_reason=turn.finish_reason,
                )
            )
            changes: dict[str, object] = {"updated_ms": max(created, conv.updated_ms)}
            if conv.title is None and turn.status != "error":
                changes["title"] = title_from(turn.answer, turn.user_text)
            await conn.execute(update(conversations).where(conversations.c.id == conv.key).values(**changes))
            return turn_id, True

    async def list_conversations(
        self, tenant: str, user: str = "", limit: int = 20, cursor: str | None = None
    ) -> tuple[list[ConversationSummary], str | None]:
        """Newest activity first; keyset pagination on (updated_ms, chat_id) so inserts never shift a page."""
        c = conversations.c
        n_turns = select(func.count()).select_from(turns).where(turns.c.conversation_id == c.id).scalar_subquery()
        q = select(conversations, n_turns.label("n")).where(c.tenant == tenant)
        if user:
            q = q.where(c.user == user)
        after = decode_cursor(cursor, 2)
        if after is not None:
            q = q.where(or_(c.updated_ms < after[0], and_(c.updated_ms == after[0], c.chat_id < after[1])))
        q = q.order_by(c.updated_ms.desc(), c.chat_id.desc()).limit(limit + 1)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        items = [
            ConversationSummary(
                chat_id=r.chat_id, title=r.title, created_ms=r.created_ms, updated_ms=r.updated_ms, turns=r.n
            )
            for r in rows[:limit]
        ]
        nxt = encode_cursor(items[-1].updated_ms, items[-1].chat_id) if len(rows) > limit else None
        return items, nxt

    async def rename(self, tenant: str, chat_id: str, title: str) -> Conversation | None:
        async with self.engine.begin() as conn:
            res = await conn.execute(
                update(conversations)
                .where(conversations.c.tenant == tenant, conversations.c.chat_id == chat_id)
                .values(title=title)
            )
            if res.rowcount == 0:
                return None
            return await self._find(conn, tenant, chat_id)

    async def delete(self, tenant: str, chat_id: str) -> bool:
        async with self.engine.begin() as conn:
            conv = await self._find(conn, tenant, chat_id)
            if conv is None:
                return False
            # Explicit, not only ON DELETE CASCADE: SQLite enforces it only with foreign_keys=ON.
            await conn.execute(delete(turns).where(turns.c.conversation_id == conv.key))
            await conn.execute(delete(conversations).where(conversations.c.id == conv.key))
            return True

    async def delete_turn(self, tenant: str, chat_id: str, rid: str) -> bool:
        """Delete the turn `rid` made; the conversation too when no turn is left. False when the tenant has
        no such turn."""
        async with self.engine.begin() as conn:
            conv = await self._find(conn, tenant, chat_id)
            if conv is None:
                return False
            t = turns.c
            res = await conn.execute(delete(turns).where(t.conversation_id == conv.key, t.rid == rid))
            if res.rowcount == 0:
                return False
            left = (await conn.execute(select(func.count()).where(t.conversation_id == conv.key))).scalar_one()
            if left == 0:
                await conn.execute(delete(conversations).where(conversations.c.id == conv.key))
            return True

    async def search(self, tenant: str, q: str, user: str = "", limit: int = 20) -> list[SearchHit]:
        """Case-insensitive substring search over titles, questions and answers; newest first."""
        pat = like_pattern(q)
        c, t = conversations.c, turns.c
        scope = [c.tenant == tenant] + ([c.user == user] if user else [])
        by_turn = (
            select(c.chat_id, c.title, t.id.label("turn_id"), t.user_text, t.answer, t.created_ms)
            .select_from(turns.join(conversations, t.conversation_id == c.id))
            .where(
                *scope,
                or_(func.lower(t.user_text).like(pat, escape="\\"), func.lower(t.answer).like(pat, escape="\\")),
            )
            .order_by(t.seq.desc())
            .limit(limit)
        )
        by_title = (
            select(c.chat_id, c.title, c.updated_ms)
            .where(*scope, func.lower(c.title).like(pat, escape="\\"))
            .order_by(c.updated_ms.desc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            turn_rows = (await conn.execute(by_turn)).all()
            title_rows = (await conn.execute(by_title)).all()
        hits = [
            SearchHit(chat_id=r.chat_id, title=r.title, snippet=r.title or "", created_ms=r.updated_ms)
            for r in title_rows
        ]
        for r in turn_rows:
            text = r.user_text if q.lower() in r.user_text.lower() else r.answer
            hits.append(
                SearchHit(
                    chat_id=r.chat_id,
                    title=r.title,
                    turn_id=r.turn_id,
                    snippet=snippet(text, q),
                    created_ms=r.created_ms,
                )
            )
        hits.sort(key=lambda h: h.created_ms, reverse=True)
        return hits[:limit]


def snippet(text: str, q: str, width: int = 80) -> str:
    i = text.lower().find(q.lower())
    if i < 0:
        return text[:width]
    start = max(0, i - width // 2)
    end = min(len(text), i + len(q) + width // 2)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
