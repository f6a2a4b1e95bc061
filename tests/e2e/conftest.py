"""Helpers for driving the whole pipeline; the session's stack and client fixtures are in tests/conftest.py
(shared with tests/security)."""

from __future__ import annotations

from typing import Any

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.sse import Event, events
from tests.wait import wait_until


def chat(client: httpx.Client, chat_id: str, text: str, **extra: Any) -> tuple[list[Event], httpx.Response]:
    with client.stream("POST", "/chat", json={"chatId": chat_id, "text": text, **extra}) as resp:
        if resp.status_code != 200:
            resp.read()
            return [], resp
        return list(events(resp)), resp


def admin_record(stack: Stack, rid: str, until: Any = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """The logger writes asynchronously: poll until the record satisfies `until`."""

    def stored() -> dict[str, Any]:
        r = httpx.get(f"{stack.url}/v1/admin/requests/{rid}", headers={"Authorization": f"Bearer {stack.admin_key}"})
        assert r.status_code == 200, f"HTTP {r.status_code}"
        got: dict[str, Any] = r.json()
        # Not yet: the timeout reports the record as it last stood.
        assert until is None or until(got), got
        return got

    record: dict[str, Any] = wait_until(
        stored, timeout_s, f"the record of {rid} to satisfy the condition", 0.3, ignore=(AssertionError,)
    )
    return record
