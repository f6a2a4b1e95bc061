"""What the context service adds to a request besides history: saved memory, uploaded files, the
tenant's standing instructions and its safety policy. Every read and write is scoped by tenant (and
user where it applies)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    func,
    select,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.db import create_all, sqlite_reader
from switchyard.libs.store.sql import insert_ignore, now_ms, upsert
from switchyard.schemas import FileInfo, Instructions, MemoryItem, SafetyPolicyEntry, TenantSafety

metadata = MetaData()

memory = Table(
    "memory",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("tenant", String(), nullable=False),
    Column("user", String(), nullable=False),
    Column("text", Text, nullable=False),
    Column("source_rid", String(), nullable=False, default=""),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_memory_owner", "tenant", "user", "seq"),
)

files = Table(
    "files",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("tenant", String(), nullable=False),
    Column("user", String(), nullable=False),
    Column("chat_id", String()),
    Column("name", String(255), nullable=False),
    Column("media_type", String(), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index("ix_files_owner", "tenant", "user", "seq"),
    Index("ix_files_chat", "tenant", "chat_id", "seq"),
)

instructions = Table(
    "tenant_instructions",
    metadata,
    Column("tenant", String(), primary_key=True),
    Column("text", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

# The tenant's overrides as `TenantSafety` JSON: new policy fields need no migration, and a row
# written before a field existed reads back with that field's default.
safety_policies = Table(
    "tenant_safety_policy",
    metadata,
    Column("tenant", String(), primary_key=True),
    Column("policy", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)


def _file_info(row: Any, chars: int) -> FileInfo:
    return FileInfo(
        id=row.id,
        name=row.name,
        media_type=row.media_type,
        chars=chars,
        chat_id=row.chat_id,
        created_ms=row.created_ms,
    )


class KnowledgeStore:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self.reader = sqlite_reader(engine)

    async def init(self) -> None:
        await create_all(self.engine, metadata)

    # ---- memory ---------------------------------------------------------------------------

    async def remember(self, tenant: str, user: str, text: str, source_rid: str = "") -> MemoryItem:
        """Save a fact; a fact from a request (`source_rid`) is saved once however often it is retried."""
        item_id = uuid.uuid5(uuid.NAMESPACE_URL, f"memory:{source_rid}").hex if source_rid else uuid.uuid4().hex
        created = now_ms()
        async with self.engine.begin() as conn:
            await conn.execute(
                insert_ignore(conn, memory, ["id"]).values(
                    id=item_id, tenant=tenant, user=user, text=text, source_rid=source_rid, created_ms=created
                )
            )
        return MemoryItem(id=item_id, text=text, created_ms=created, source_rid=source_rid)

    async def memories(self, tenant: str, user: str) -> list[MemoryItem]:
        """Oldest first: a new fact appends to the rendered list instead of reshuffling it."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(_memories, tenant, user)

    async def forget(self, tenant: str, user: str, item_id: str) -> bool:
        async with self.engine.begin() as conn:
            res = await conn.execute(
                delete(memory).where(memory.c.id == item_id, memory.c.tenant == tenant, memory.c.user == user)
            )
            return bool(res.rowcount)

    # ---- files ----------------------------------------------------------------------------

    async def add_file(
        self, tenant: str, user: str, name: str, text: str, media_type: str = "text/plain", chat_id: str | None = None
    ) -> FileInfo:
        file_id = "file-" + uuid.uuid4().hex[:24]
        created = now_ms()
        async with self.engine.begin() as conn:
            await conn.execute(
                files.insert().values(
                    id=file_id,
                    tenant=tenant,
                    user=user,
                    chat_id=chat_id,
                    name=name,
                    media_type=media_type,
                    text=text,
                    created_ms=created,
                )
            )
        return FileInfo(
            id=file_id, name=name, media_type=media_type, chars=len(text), chat_id=chat_id, created_ms=created
        )

    async def get_file(self, tenant: str, file_id: str) -> tuple[FileInfo, str] | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(files).where(files.c.id == file_id, files.c.tenant == tenant))).first()
        return None if row is None else (_file_info(row, len(row.text)), row.text)

    async def list_files(self, tenant: str, user: str = "", chat_id: str | None = None) -> list[FileInfo]:
        c = files.c
        chars = func.length(c.text).label("chars")
        q = select(c.id, c.name, c.media_type, c.chat_id, c.created_ms, chars).where(c.tenant == tenant)
        if user:
            q = q.where(c.user == user)
        if chat_id is not None:
            q = q.where(c.chat_id == chat_id)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q.order_by(c.seq))).all()
        return [_file_info(r, r.chars) for r in rows]

    async def chat_files(self, tenant: str, chat_id: str) -> list[tuple[FileInfo, str]]:
        """Files attached to one conversation with their text, in upload order (a stable prompt)."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(_chat_files, tenant, chat_id)

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        async with self.engine.begin() as conn:
            res = await conn.execute(delete(files).where(files.c.id == file_id, files.c.tenant == tenant))
            return bool(res.rowcount)

    async def delete_chat_files(self, tenant: str, chat_id: str) -> int:
        """Drop the files attached to a conversation being deleted; the user's library stays."""
        async with self.engine.begin() as conn:
            res = await conn.execute(delete(files).where(files.c.tenant == tenant, files.c.chat_id == chat_id))
            return int(res.rowcount or 0)

    # ---- tenant instructions --------------------------------------------------------------

    async def instructions(self, tenant: str) -> Instructions:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(instructions).where(instructions.c.tenant == tenant))).first()
        if row is None:
            return Instructions(tenant=tenant)
        return Instructions(tenant=tenant, text=row.text, updated_ms=row.updated_ms)

    async def set_instructions(self, tenant: str, text: str) -> Instructions:
        now = now_ms()
        async with self.engine.begin() as conn:
            await conn.execute(
                upsert(conn, instructions, ["tenant"], ["text", "updated_ms"]).values(
                    tenant=tenant, text=text, updated_ms=now
                )
            )
        return Instructions(tenant=tenant, text=text, updated_ms=now)

    # ---- tenant safety policy -------------------------------------------------------------

    async def safety_policy(self, tenant: str) -> SafetyPolicyEntry:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(safety_policies).where(safety_policies.c.tenant == tenant))).first()
        if row is None:
            return SafetyPolicyEntry(tenant=tenant)
        return SafetyPolicyEntry(tenant=tenant, policy=TenantSafety.from_stored(row.policy), updated_ms=row.updated_ms)

    async def set_safety_policy(self, tenant: str, policy: TenantSafety) -> SafetyPolicyEntry:
        now = now_ms()
        async with self.engine.begin() as conn:
            await conn.execute(
                upsert(conn, safety_policies, ["tenant"], ["policy", "updated_ms"]).values(
                    tenant=tenant, policy=policy.model_dump_json(), updated_ms=now
                )
            )
        return SafetyPolicyEntry(tenant=tenant, policy=policy, updated_ms=now)

    async def tenant_settings(self, tenant: str) -> tuple[Instructions, TenantSafety]:
        """What every request of the tenant needs (instructions and safety policy), on one connection."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(_settings, tenant)

    async def prompt_inputs(self, tenant: str, user: str, chat_id: str | None) -> PromptInputs:
        """What every prompt reads from this store (`memories`, `tenant_settings` and, for a stored
        conversation, `chat_files`), in one go: on a SQLite file, one hand-off to a worker thread for
        all of it (`sqlite_reader`); elsewhere, one connection."""
        if self.reader is not None:
            return await asyncio.to_thread(self._prompt_inputs_now, tenant, user, chat_id)
        async with self.engine.connect() as conn:
            return await conn.run_sync(_prompt_inputs, tenant, user, chat_id)

    def _prompt_inputs_now(self, tenant: str, user: str, chat_id: str | None) -> PromptInputs:
        assert self.reader is not None
        with self.reader.connect() as conn:
            return _prompt_inputs(conn, tenant, user, chat_id)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.dispose()


PromptInputs = tuple[list[MemoryItem], Instructions, TenantSafety, list[tuple[FileInfo, str]]]


def _prompt_inputs(conn: Connection, tenant: str, user: str, chat_id: str | None) -> PromptInputs:
    items = _memories(conn, tenant, user)
    ins, policy = _settings(conn, tenant)
    return items, ins, policy, _chat_files(conn, tenant, chat_id) if chat_id else []


def _memories(conn: Connection, tenant: str, user: str) -> list[MemoryItem]:
    q = select(memory).where(memory.c.tenant == tenant, memory.c.user == user).order_by(memory.c.seq)
    return [MemoryItem(id=r.id, text=r.text, created_ms=r.created_ms, source_rid=r.source_rid) for r in conn.execute(q)]


def _chat_files(conn: Connection, tenant: str, chat_id: str) -> list[tuple[FileInfo, str]]:
    q = select(files).where(files.c.tenant == tenant, files.c.chat_id == chat_id).order_by(files.c.seq)
    return [(_file_info(r, len(r.text)), r.text) for r in conn.execute(q)]


def _settings(conn: Connection, tenant: str) -> tuple[Instructions, TenantSafety]:
    text_row = conn.execute(select(instructions).where(instructions.c.tenant == tenant)).first()
    policy_row = conn.execute(select(safety_policies.c.policy).where(safety_policies.c.tenant == tenant)).first()
    ins = (
        Instructions(tenant=tenant)
        if text_row is None
        else Instructions(tenant=tenant, text=text_row.text, updated_ms=text_row.updated_ms)
    )
    policy = TenantSafety() if policy_row is None else TenantSafety.from_stored(policy_row.policy)
    return ins, policy
