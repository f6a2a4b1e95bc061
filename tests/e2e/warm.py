"""Readiness says every stage answers; the router also needs an inference heartbeat before it can route.
Tests that must not see that start-up gap send one request that is retried until it is answered."""

from __future__ import annotations

import time

import httpx

from tests.e2e.conftest import chat

_warm = False


def warm(client: httpx.Client, timeout_s: float = 90.0) -> None:
    global _warm
    if _warm:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        evs, resp = chat(client, "warmup", "Hi.", max_tokens=2)
        if resp.status_code == 200 and evs and evs[-1].event == "done":
            _warm = True
            return
        assert time.monotonic() < deadline, f"the stack never answered: {resp.status_code} {evs[-1:]}"
        time.sleep(1.0)
