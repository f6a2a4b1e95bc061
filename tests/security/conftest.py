"""Security tests drive the session's whole stack (tests/conftest.py) as an attacker would: a second
tenant's key, and the checks every test ends with (the stack still answers a normal chat)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from switchyard.libs.store.keys import KeyStore
from tests.e2e.conftest import chat


async def _new_key(stack: Stack, tenant: str) -> tuple[str, str]:
    # The gateway's own store (SQLite under the stack's data dir): a key made here works at once.
    store = await KeyStore.open(database_url(None, str(stack.data_dir), "gateway"))
    try:
        key, raw = await store.create(tenant, "pro", user="mallory")
    finally:
        await store.close()
    return key.id, raw


@pytest.fixture(scope="module")
def attacker_key(stack: Stack) -> tuple[str, str]:
    """(id, raw) of a key of another tenant than the dev key's."""
    return asyncio.run(_new_key(stack, f"attacker-{uuid.uuid4().hex[:6]}"))


@pytest.fixture(scope="module")
def attacker(stack: Stack, attacker_key: tuple[str, str]) -> Iterator[httpx.Client]:
    """A client with the attacker's key."""
    headers = {"Authorization": f"Bearer {attacker_key[1]}"}
    with httpx.Client(base_url=stack.url, timeout=120, headers=headers) as c:
        yield c


def assert_error(r: httpx.Response, status: int | tuple[int, ...], code: str | None = None) -> None:
    statuses = (status,) if isinstance(status, int) else status
    assert r.status_code in statuses, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"error"} and {"type", "code", "message"} <= set(body["error"]), body
    if code is not None:
        assert body["error"]["code"] == code, body


def assert_healthy(client: httpx.Client) -> None:
    """A normal chat still completes."""
    evs, resp = chat(client, f"ok-{uuid.uuid4().hex[:8]}", "Say hello.", max_tokens=4)
    assert evs and evs[-1].event == "done", [e.event for e in evs] or resp.text
