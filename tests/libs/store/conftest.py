"""Every store test runs on SQLite, and on PostgreSQL too when SWITCHYARD_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.db import make_engine

PG_URL = os.environ.get("SWITCHYARD_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        eng = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
        yield eng
        await eng.dispose()
        return
    if not PG_URL:
        pytest.skip("set SWITCHYARD_TEST_POSTGRES_URL to run the store tests on PostgreSQL too")
    # A private schema per test: tests never see each other's rows, nor other projects' tables.
    schema = f"sy_test_{uuid.uuid4().hex[:10]}"
    base = make_engine(PG_URL)
    async with base.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield base.execution_options(schema_translate_map={None: schema})
    async with base.begin() as conn:
        await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    await base.dispose()
