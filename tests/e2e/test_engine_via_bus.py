"""The engine behind the bus: concurrent requests share engine steps; a follow-up turn hits the prefix cache."""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.conftest import chat


def metric(stack: Stack, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{stack.metrics_port}/metrics").text
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert m, f"{name} not exported"
    return float(m.group(1))


def test_concurrent_requests_are_batched(client: httpx.Client, stack: Stack) -> None:
    prompts = [f"Write three sentences about the number {i}." for i in range(6)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: chat(client, f"b-{uuid.uuid4().hex[:8]}", p)[0], prompts))
    assert all(r and r[-1].event == "done" for r in results)
    # The engine's own batch-size metric: several sequences decoded in one step.
    assert metric(stack, "switchyard_engine_max_batch_size") >= 2


def test_second_turn_reports_cached_tokens(client: httpx.Client) -> None:
    chat_id = f"p-{uuid.uuid4().hex[:8]}"
    first, _ = chat(client, chat_id, "Tell me one fact about the Moon.")
    assert first[-1].event == "done"
    second, _ = chat(client, chat_id, "And one about the Sun?")
    done = second[-1]
    assert done.event == "done"
    # The whole first turn (system block, question, answer) is a cached prefix of the second prompt.
    assert done.data["cached_tokens"] >= 16, done.data
    assert done.data["cached_tokens"] < done.data["prompt_tokens"]
