"""Engine construction shared by every store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, MetaData, Table, create_engine, event, inspect, text
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
    # A server's connection can go stale (a restart, an idle timeout); a SQLite file's cannot, and the
    # ping would cost every checkout a round trip to the database's thread.
    engine = create_async_engine(url, pool_pre_ping=not url.startswith("sqlite"))
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(conn: Any, _record: Any) -> None:
    # WAL lets readers (the console) proceed while a writer holds the file.
    cur = conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def sqlite_reader(engine: AsyncEngine) -> Engine | None:
    """For a SQLite file, a synchronous engine on the same file, for reads run whole on a worker thread:
    through aiosqlite every statement is four hand-offs between the event loop and the connection's
    thread (cursor, execute, fetch, close), each a GIL switch. None for any other database."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    # A connection moves between the executor's threads, used by one at a time (the pool hands it out once).
    reader = create_engine(url.set(drivername="sqlite"), connect_args={"check_same_thread": False})
    event.listen(reader, "connect", _sqlite_pragmas)
    return reader


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
