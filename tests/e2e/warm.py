"""Readiness says every stage answers; the router also needs an inference heartbeat before it can route.
Tests that must not see that start-up gap send one request that is retried until it is answered."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import chat
from tests.wait import wait_until

_warm = False


def warm(client: httpx.Client, timeout_s: float = 90.0) -> None:
    global _warm
    if _warm:
        return

    def answered() -> bool:
        evs, resp = chat(client, "warmup", "Hi.", max_tokens=2)
        assert resp.status_code == 200 and evs and evs[-1].event == "done", f"{resp.status_code} {evs[-1:]}"
        return True

    # A refusal is "not yet"; the timeout reports the last one.
    wait_until(answered, timeout_s, "the stack to answer", 1.0, ignore=(AssertionError,))
    _warm = True
