"""Dialect seams shared by the stores: the few statements SQLite and PostgreSQL spell differently."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import Insert


def now_ms() -> int:
    return int(time.time() * 1000)


def _insert(conn: AsyncConnection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise RuntimeError(f"unsupported database dialect {conn.dialect.name}")


def insert_ignore(conn: AsyncConnection, table: Table, keys: Sequence[str]) -> Insert:
    """INSERT that does nothing when a row with the same `keys` exists: the idempotent write."""
    stmt: Insert = _insert(conn, table).on_conflict_do_nothing(index_elements=list(keys))
    return stmt


def upsert(conn: AsyncConnection, table: Table, keys: Sequence[str], update: Sequence[str]) -> Insert:
    """INSERT, or on a key conflict overwrite the `update` columns with the new values."""
    ins = _insert(conn, table)
    stmt: Insert = ins.on_conflict_do_update(
        index_elements=list(keys), set_={c: getattr(ins.excluded, c) for c in update}
    )
    return stmt


def like_pattern(q: str) -> str:
    """A case-folded `%q%` with LIKE's wildcards escaped (use with `escape="\\\\"`)."""
    esc = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{esc}%"


def encode_cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode()


def decode_cursor(cursor: str | None, arity: int) -> list[Any] | None:
    """The parts of a cursor from `encode_cursor`, or None when absent or malformed."""
    if not cursor:
        return None
    try:
        parts = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parts, list) or len(parts) != arity:
        return None
    return parts
