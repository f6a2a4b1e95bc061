"""What the client saw is stored, whatever process dies mid-answer; the bus itself can die and come back.

A property over every process of the stack: answers stream, one process is killed (SIGKILL) while they do
and started again at once (as the supervisor would), and every answer a client received is then found
stored: the whole of it for a client that got `done`, at least what it was shown for one that got an error
or lost its connection. Then the nats-server: the streams in flight end with a clean error within 2 s,
the server comes back on its port with its store, the services reconnect by themselves, `/readyz`
recovers with nobody touching them, and what each client was shown is stored.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import nats as nats_client
import pytest
from nats.js.errors import NotFoundError

from switchyard.cli.stack import SERVICES, Stack
from switchyard.schemas import subjects
from tests.e2e.conftest import chat
from tests.e2e.sse import events
from tests.wait import wait_until

LONG = "Write a long story about a lighthouse keeper and a storm."
STREAMS = 2
MAX_TOKENS = 48
# The gateway ends streams this soon after the bus is lost (bus_lost_after_s is 1 s).
BUS_LOST_END_S = 2.0


@dataclass
class Stream:
    """One client's view of one answer, filled by its own thread."""

    chat_id: str
    text: str = ""
    end: str | None = None  # done | error | dropped (the connection broke)
    error: dict[str, Any] | None = None
    ended_at: float = 0.0
    deltas: int = 0
    thread: threading.Thread | None = field(default=None, repr=False)


def _read(stack: Stack, s: Stream) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    body = {"chatId": s.chat_id, "text": LONG, "max_tokens": MAX_TOKENS}
    try:
        with (
            httpx.Client(base_url=stack.url, timeout=180, headers=headers) as c,
            c.stream("POST", "/chat", json=body) as r,
        ):
            if r.status_code != 200:
                r.read()
                s.end, s.error = "refused", r.json()
                return
            for ev in events(r):
                if ev.event == "delta":
                    s.text += ev.data["text"]
                    s.deltas += 1
                elif ev.event in ("done", "error"):
                    s.end, s.error = ev.event, ev.data if ev.event == "error" else None
                    return
    except httpx.HTTPError:
        s.end = "dropped"
    finally:
        s.ended_at = time.monotonic()
        s.end = s.end or "dropped"


def start_streams(stack: Stack, n: int) -> list[Stream]:
    streams = [Stream(f"fault-{uuid.uuid4().hex[:10]}") for _ in range(n)]
    for s in streams:
        s.thread = threading.Thread(target=_read, args=(stack, s), daemon=True)
        s.thread.start()
    # Mid-answer: each has shown some text (or already ended).
    wait_until(lambda: all(s.deltas or s.end for s in streams), 180, "every stream to show text", 0.02)
    return streams


def finish(streams: list[Stream], timeout_s: float = 240) -> None:
    for s in streams:
        assert s.thread is not None
        s.thread.join(timeout_s)
        assert not s.thread.is_alive(), f"stream {s.chat_id} did not end within {timeout_s}s"


def assert_stored(stack: Stack, streams: list[Stream]) -> None:
    """Every answer a client received is stored: all of it after `done`, what it was shown otherwise."""
    # A client of its own: the session's may hold a connection to a gateway that was killed.
    client = httpx.Client(base_url=stack.url, timeout=60, headers={"Authorization": f"Bearer {stack.api_key}"})
    with client:
        _assert_stored(client, streams)


def _assert_stored(client: httpx.Client, streams: list[Stream]) -> None:
    for s in streams:
        if not s.text:
            continue  # nothing was shown: nothing is owed

        def stored(s: Stream = s) -> dict[str, Any]:
            r = client.get(f"/v1/conversations/{s.chat_id}")
            assert r.status_code == 200, (s, r.status_code, r.text[:300])
            turns = r.json()["turns"]
            assert turns, s
            turn: dict[str, Any] = turns[-1]
            return turn

        # Saved before `done`, so at once then; after an error or a dropped connection the saving may
        # still be under way (it waits for a restarting stage or the bus), within its bound.
        turn = (
            stored()
            if s.end == "done"
            else wait_until(stored, 60, f"{s.chat_id} stored", 0.3, ignore=(AssertionError,))
        )
        if s.end == "done":
            assert turn["answer"] == s.text and turn["status"] == "complete", (s, turn)
        else:
            assert turn["answer"].startswith(s.text), (s, turn)


async def _events_stream_exists(url: str) -> bool:
    nc = await nats_client.connect(url)
    try:
        await nc.jetstream().stream_info(subjects.CHAT_EVENTS_STREAM)
        return True
    except NotFoundError:
        return False
    finally:
        await nc.close()


def kill(stack: Stack, tag: str) -> None:
    proc = stack.procs[tag]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("tag", SERVICES)
def test_every_answer_a_client_received_is_stored_whichever_process_dies_mid_answer(
    client: httpx.Client, stack: Stack, tag: str
) -> None:
    streams = start_streams(stack, STREAMS)
    kill(stack, tag)
    try:
        stack.restart_service(tag)  # at once, as the supervisor would (after its first 0.5 s)
        finish(streams)
        stack.wait_ready(300)
        print(f"kill -9 {tag}: " + ", ".join(f"{s.end} after {len(s.text)} chars" for s in streams))
        assert_stored(stack, streams)
        for s in streams:
            if s.end == "error":
                assert s.error is not None and s.error.get("code") == "unavailable", s
    finally:
        if stack.procs.get(tag) is None or stack.procs[tag].poll() is not None:
            stack.restart_service(tag)
        stack.wait_ready(300)


def test_a_killed_nats_server_ends_streams_cleanly_and_everything_comes_back(
    client: httpx.Client, stack: Stack
) -> None:
    nats = stack.nats
    assert nats is not None
    port, store = nats.port, nats.store_dir
    streams = start_streams(stack, STREAMS)
    os.kill(nats.proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    nats.proc.wait()
    try:
        finish(streams, timeout_s=30)
        for s in streams:
            if s.ended_at - killed_at > 0.05:  # ended by the loss, not before it
                took = s.ended_at - killed_at
                print(f"bus killed -> {s.end} in {took * 1000:.0f} ms")
                assert s.end == "error" and s.error is not None and s.error["code"] == "unavailable", s
                assert took < BUS_LOST_END_S, s
        # While it is away the gateway says so at once, in the one error shape.
        r = client.post("/chat", json={"chatId": f"f-{uuid.uuid4().hex[:8]}", "text": "Hi"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable", r.text
    finally:
        nats.restart()  # what the supervisor does (tests/cli/test_stack.py checks that it does)
    assert (nats.port, nats.store_dir) == (port, store)

    # Nobody restarts a service: they reconnect, and readiness comes back by itself.
    def ready() -> bool:
        return httpx.get(f"{stack.url}/readyz", timeout=5).status_code == 200

    wait_until(ready, 60, "/readyz to recover after the bus restarted", 0.5, ignore=(httpx.HTTPError,))
    assert all(p.poll() is None for p in stack.procs.values())
    # The in-memory resume stream died with the server; the gateway made it anew on reconnecting.
    wait_until(lambda: asyncio.run(_events_stream_exists(nats.url)), 30, "the events stream made anew", 0.5)
    assert_stored(stack, streams)
    evs, _ = chat(client, f"f-{uuid.uuid4().hex[:8]}", "Say hello.", max_tokens=8)
    assert evs and evs[-1].event == "done", evs
