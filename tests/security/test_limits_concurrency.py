"""Limits hold under concurrency: 32 requests at once against one key.

- A token budget admits at most what the key has left: each chat reserves its window before it runs and
  settles to what it used, so however many run at once the key's spend never passes its budget.
- Every write route takes from the key's per-minute request bucket: of 32 writes at once, at most the
  tier's limit pass; the rest are 429 in the one error shape, with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from switchyard.libs.store.keys import KeyStore
from tests.e2e.conftest import chat
from tests.e2e.sse import Event
from tests.security.conftest import assert_error
from tests.wait import wait_until

AT_ONCE = 32
# The free tier's requests per minute (switchyard/services/gateway/settings.py).
FREE_RPM = 20


async def _new_key(stack: Stack, tier: str, **policy: Any) -> tuple[str, str]:
    store = await KeyStore.open(database_url(None, str(stack.data_dir), "gateway"))
    try:
        key, raw = await store.create(f"limits-{uuid.uuid4().hex[:6]}", tier, user="u", **policy)
    finally:
        await store.close()
    return key.id, raw


def _used(evs: list[Event]) -> int:
    usage = evs[-1].data if evs and evs[-1].event == "done" else {}
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def test_a_token_budget_admits_at_most_what_is_left_to_32_requests_at_once(stack: Stack, client: httpx.Client) -> None:
    # What one such request costs here, to size a budget a few of them would spend.
    one, _ = chat(client, f"b-{uuid.uuid4().hex[:8]}", "Say hi.", max_tokens=8)
    assert one[-1].event == "done", one
    budget = 3 * _used(one)
    key_id, raw = asyncio.run(_new_key(stack, "pro", budget_day=budget))
    headers = {"Authorization": f"Bearer {raw}"}

    def one_chat(i: int) -> tuple[int, list[Event], dict[str, Any]]:
        with httpx.Client(base_url=stack.url, timeout=300, headers=headers) as c:
            evs, resp = chat(c, f"b{i}-{uuid.uuid4().hex[:6]}", "Say hi.", max_tokens=8)
            return resp.status_code, evs, ({} if evs else resp.json())

    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(one_chat, range(AT_ONCE)))
    answered = [evs for status, evs, _ in results if status == 200]
    refused = [(status, body) for status, evs, body in results if status != 200]
    spent_by_clients = sum(_used(evs) for evs in answered)
    print(f"budget {budget}: {len(answered)} answered ({spent_by_clients} tokens), {len(refused)} refused")
    assert answered and spent_by_clients <= budget
    assert refused, "32 requests at once on a budget for about three: some must be refused"
    for status, body in refused:
        assert status == 429 and body["error"]["code"] == "rate_limited", body
        assert "budget" in body["error"]["message"]

    # The key's own count, once every request has settled its reservation: never past the budget.
    admin = {"Authorization": f"Bearer {stack.admin_key}"}

    def settled() -> dict[str, Any]:
        r = httpx.get(f"{stack.url}/v1/admin/keys/{key_id}/usage", headers=admin, timeout=30)
        assert r.status_code == 200, r.text
        day: dict[str, Any] = r.json()["budgets"]["day"]
        assert day["spent"] == spent_by_clients, day  # reservations given back: what was used, exactly
        return day

    day = wait_until(settled, 60, "the reservations to be settled", 0.3, ignore=(AssertionError,))
    assert day["spent"] <= budget


def _write(c: httpx.Client, i: int) -> httpx.Response:
    """One of the write routes, in turn: conversations, memory, feedback."""
    if i % 3 == 0:
        return c.post("/v1/conversations", json={"title": f"t{i}"})
    if i % 3 == 1:
        return c.post("/v1/memory", json={"text": f"My favourite number is {i}."})
    return c.post("/v1/feedback", json={"rid": f"r{uuid.uuid4().hex[:12]}", "rating": "up"})


def test_32_writes_at_once_pass_at_most_the_tier_limit_and_the_rest_are_429(stack: Stack) -> None:
    _, raw = asyncio.run(_new_key(stack, "free"))
    headers = {"Authorization": f"Bearer {raw}"}

    def one_write(i: int) -> httpx.Response:
        with httpx.Client(base_url=stack.url, timeout=120, headers=headers) as c:
            return _write(c, i)

    t0 = time.monotonic()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        responses = list(pool.map(one_write, range(AT_ONCE)))
    took_s = time.monotonic() - t0
    limited = [r for r in responses if r.status_code == 429]
    passed = [r for r in responses if r.status_code != 429]
    # The bucket refills at FREE_RPM a minute while the burst runs.
    allowed = FREE_RPM + int(took_s * FREE_RPM / 60)
    print(f"{len(passed)} passed, {len(limited)} refused in {took_s:.1f} s (allowed {allowed})")
    assert len(passed) <= allowed, [r.status_code for r in responses]
    assert len(limited) >= AT_ONCE - allowed
    for r in limited:
        assert_error(r, 429, "rate_limited")
        assert float(r.headers["Retry-After"]) >= 1
    # Once spent, every write route is refused the same way. The bucket keeps refilling (one every 3 s),
    # so a route may pass once or twice first; over the whole test no more pass than the limit allows.
    routes = [
        lambda c: _write(c, 0),
        lambda c: _write(c, 1),
        lambda c: _write(c, 2),
        lambda c: c.patch("/v1/conversations/nope", json={"title": "x"}),
        lambda c: c.delete("/v1/memory/nope"),
    ]
    extra = 0
    with httpx.Client(base_url=stack.url, timeout=60, headers=headers) as c:
        for route in routes:
            for _ in range(5):
                r = route(c)
                if r.status_code == 429:
                    assert_error(r, 429, "rate_limited")
                    break
                extra += 1
            else:
                raise AssertionError(f"a write route was never refused: {r.status_code} {r.text[:200]}")
        # Reads are not counted.
        assert c.get("/v1/conversations").status_code == 200
    allowed = FREE_RPM + int((time.monotonic() - t0) * FREE_RPM / 60)
    assert len(passed) + extra <= allowed
