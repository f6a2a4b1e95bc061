"""Engine construction shared by every store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, Table, event, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def database_url(configured: str | None, data_dir: str, name: str) -> str:
    """The configured URL, else a SQLite file `<data_dir>/<name>.db`."""
    if configured:
        return configured
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{Path(data_dir).resolve() / name}.db"


def make_engine(url: str) -> AsyncEngine:
    if url.startswith("postgresql://"):
        url = "postgresql+asyncpg://" + url.removeprefix("postgresql://")
    engine = create_async_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
            # WAL lets readers (the console) proceed while a writer holds the file.
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


async def create_all(engine: AsyncEngine, metadata: MetaData) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)


def add_missing_columns(sync_conn: Any, table: Table, not_null_defaults: dict[str, str] | None = None) -> None:
    """A database from an older version lacks the table's newer columns: add them. Each must be
    nullable, or named in `not_null_defaults` with its SQL default."""
    # The table may live in a translated schema (tests give each run a private PostgreSQL schema).
    schema = (sync_conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    have = {c["name"] for c in inspect(sync_conn).get_columns(table.name, schema=schema)}
    name = f'"{schema}".{table.name}' if schema else table.name
    for col in table.columns:
        if col.name in have:
            continue
        ddl = col.type.compile(dialect=sync_conn.dialect)
        default = (not_null_defaults or {}).get(col.name)
        suffix = f" NOT NULL DEFAULT {default}" if default is not None else ""
        sync_conn.execute(text(f"ALTER TABLE {name} ADD COLUMN {col.name} {ddl}{suffix}"))
