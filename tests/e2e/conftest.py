"""Helpers for driving the whole pipeline; the session's stack and client fixtures are in tests/conftest.py
(shared with tests/security)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.sse import Event, events


def chat(client: httpx.Client, chat_id: str, text: str, **extra: Any) -> tuple[list[Event], httpx.Response]:
    with client.stream("POST", "/chat", json={"chatId": chat_id, "text": text, **extra}) as resp:
        if resp.status_code != 200:
            resp.read()
            return [], resp
        return list(events(resp)), resp


def admin_record(stack: Stack, rid: str, until: Any = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """The logger writes asynchronously: poll until the record satisfies `until`."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = httpx.get(f"{stack.url}/v1/admin/requests/{rid}", headers={"Authorization": f"Bearer {stack.admin_key}"})
        if r.status_code == 200:
            last = r.json()
            if until is None or until(last):
                return last
        time.sleep(0.3)
    raise AssertionError(f"record of {rid} never satisfied the condition; last: {str(last)[:2000]}")
