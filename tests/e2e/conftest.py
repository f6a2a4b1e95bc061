"""The whole pipeline, each service its own process, over a real nats-server; started once per session."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.stack import Stack
from libs.bus.embedded import free_port
from tests.e2e.sse import Event, events


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = Path(tmp_path_factory.mktemp("stack"))
    # The converted model weights outlive the session's data dir, so later sessions start fast.
    cache = Path(__file__).resolve().parents[2] / "var" / "cache" / "engine"
    env = {
        "SWITCHYARD_LOG_LEVEL": os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO"),
        "SWITCHYARD_INFERENCE_CACHE_DIR": str(cache),
    }
    s = Stack(data_dir=data, port=free_port(), env=env)
    try:
        s.start(timeout_s=600)
    except Exception:
        s.stop()
        for log in sorted((data / "logs").glob("*.log")):
            print(f"---- {log.name}\n{log.read_text()[-3000:]}")
        raise
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {stack.api_key}"}) as c:
        yield c


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
