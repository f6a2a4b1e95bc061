"""Tiers reach the engine, on the real stack: with one engine seat and a queue of free-tier requests
waiting, a pro-tier request is served ahead of them (it even takes the running one's seat), and each
tenant's cached prefixes are its own."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.e2e.conftest import chat
from tests.wait import wait_until

MODEL = "SmolLM2-135M-Instruct"
FREE_REQUESTS = 5
# One seat, so requests queue in the engine; aging slow enough that no free request ages past the pro one.
ONE_SEAT = {"SWITCHYARD_INFERENCE_MAX_NUM_SEQS": "1", "SWITCHYARD_INFERENCE_PRIORITY_AGING_S": "60"}


@dataclass
class Timed:
    first_token: float | None = None
    done: float | None = None
    cached_tokens: int = 0


def _answered(client: httpx.Client) -> bool:
    evs, resp = chat(client, f"warm-{uuid.uuid4().hex[:6]}", "Hi.", max_tokens=2)
    assert resp.status_code == 200 and evs and evs[-1].event == "done", f"{resp.status_code} {evs[-1:]}"
    return True


@pytest.fixture
def one_seat(stack: Stack, client: httpx.Client) -> Iterator[None]:
    stack.restart_service("inference", ONE_SEAT)
    try:
        stack.wait_ready(300)
        wait_until(lambda: _answered(client), 300, "the one-seat engine to answer", 1.0, ignore=(AssertionError,))
        yield
    finally:
        stack.restart_service("inference")
        stack.wait_ready(300)
        wait_until(lambda: _answered(client), 300, "the engine to answer again", 1.0, ignore=(AssertionError,))


def _key(stack: Stack, tenant: str, tier: str) -> str:
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    made = httpx.post(f"{stack.url}/v1/admin/keys", json={"tenant": tenant, "tier": tier}, headers=admin, timeout=30)
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _stream(stack: Stack, key: str, text: str, max_tokens: int, out: Timed) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, headers=headers, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and out.first_token is None:
                out.first_token = time.monotonic()
            if chunk.get("usage"):
                out.cached_tokens = chunk["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    out.done = time.monotonic()


def _waiting(stack: Stack) -> float:
    text = httpx.get(f"http://127.0.0.1:{stack.metrics_port}/metrics", timeout=5).text
    m = re.search(r"^vllm:num_requests_waiting\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
    assert m, "vllm:num_requests_waiting not exported"
    return float(m.group(1))


def test_a_pro_request_overtakes_a_queue_of_free_ones(stack: Stack, one_seat: None) -> None:
    run = uuid.uuid4().hex[:6]
    # One tenant each: a free tenant may hold two streams at once.
    free_keys = [_key(stack, f"free-{run}-{i}", "free") for i in range(FREE_REQUESTS)]
    pro_key = _key(stack, f"pro-{run}", "pro")
    free = [Timed() for _ in free_keys]
    pro = Timed()
    with ThreadPoolExecutor(FREE_REQUESTS + 1) as pool:
        jobs = [
            pool.submit(_stream, stack, k, f"Count from one to fifty, request {i}.", 64, t)
            for i, (k, t) in enumerate(zip(free_keys, free, strict=True))
        ]
        # The engine holds one free request and queues the rest before the pro request is sent.
        wait_until(lambda: _waiting(stack) >= FREE_REQUESTS - 2, 120, "free requests to queue in the engine", 0.05)
        jobs.append(pool.submit(_stream, stack, pro_key, "Name a colour.", 4, pro))
        for j in jobs:
            j.result()
    assert pro.first_token is not None and all(f.first_token is not None for f in free)
    overtaken = [f for f in free if f.first_token > pro.first_token]  # type: ignore[operator]
    # First come, first served would have overtaken none: every free request reached the engine first.
    assert len(overtaken) >= FREE_REQUESTS - 2, (pro, free)
    # Taking the running request's seat, the pro answer ends before the queue's next free answer starts.
    assert pro.done is not None and pro.done < min(f.first_token for f in overtaken)  # type: ignore[type-var]


def test_cached_prefixes_are_shared_within_a_tenant_only(stack: Stack) -> None:
    run = uuid.uuid4().hex[:6]
    a1, a2, b = (_key(stack, t, "pro") for t in (f"salt-a-{run}", f"salt-a-{run}", f"salt-b-{run}"))
    text = "Summarise the plot of a long novel about a lighthouse keeper in two sentences. " * 4
    first, same_tenant, other_tenant = Timed(), Timed(), Timed()
    _stream(stack, a1, text, 2, first)
    _stream(stack, b, text, 2, other_tenant)
    _stream(stack, a2, text, 2, same_tenant)
    # The same prompt: the second tenant's first request finds nothing, the first tenant's second finds it.
    assert other_tenant.cached_tokens == 0, other_tenant
    assert same_tenant.cached_tokens > 16, same_tenant
