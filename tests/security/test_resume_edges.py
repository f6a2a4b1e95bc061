"""`Last-Event-ID` is validated before a stream is resumed. An id below -1 once replayed the stream's tail and
sent `done` twice, or cut the stream with an IndexError; now an id that is not an integer from -1, or names
an event past the stream's last, is a 400 in the one error shape, on the replica that relays the stream and
on any other (which replays it from JetStream)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.bus import NatsServer
from switchyard.schemas import subjects
from tests.e2e.conftest import chat
from tests.security.conftest import assert_error
from tests.services.gateway.harness import Responder, connect, gateway
from tests.services.gateway.sse_client import parse

BAD_IDS = ["-2", "-100", "abc", "1e3", "0x10", "1.0", "99999999999", "9" * 40, "1 2"]


def _ids_and_events(text: str) -> tuple[list[str], list[str]]:
    events = parse(text)
    return [e.id for e in events], [e.event for e in events]


def test_resume_positions_on_the_relaying_replica(client: httpx.Client, stack: Stack) -> None:
    evs, resp = chat(client, f"le-{uuid.uuid4().hex[:8]}", "Say hi.", max_tokens=4)
    assert evs and evs[-1].event == "done"
    rid, last = resp.headers["x-request-id"], len(evs) - 1
    path = f"/v1/streams/{rid}"

    for bad in BAD_IDS:
        r = client.get(path, headers={"Last-Event-ID": bad})
        assert_error(r, 400, "bad_request")
        assert "Last-Event-ID" in r.json()["error"]["message"] or "last-event-id" in r.json()["error"]["message"]
        assert_error(client.get(path, params={"after": bad}), 400, "bad_request")
    for past in (last + 1, last + 50):
        r = client.get(path, headers={"Last-Event-ID": str(past)})
        assert_error(r, 400, "bad_request")
        assert "past the stream's end" in r.json()["error"]["message"] and f"is {last}" in r.json()["error"]["message"]

    # Valid positions: exactly the events after the id, one `done` at the end, or nothing after the last.
    r = client.get(path, headers={"Last-Event-ID": "0"})
    assert r.status_code == 200
    ids, names = _ids_and_events(r.text)
    assert ids == [str(i) for i in range(1, last + 1)] and names.count("done") == 1 and names[-1] == "done"
    r = client.get(path, headers={"Last-Event-ID": "-1"})
    assert _ids_and_events(r.text)[0] == [str(i) for i in range(last + 1)]
    r = client.get(path, headers={"Last-Event-ID": str(last)})
    assert r.status_code == 200 and parse(r.text) == []


@pytest.fixture
async def responder(nats_server: NatsServer) -> AsyncIterator[Responder]:
    bus = await connect(nats_server, "responder")
    r = Responder(bus=bus, healthy=set(subjects.STAGES))
    await r.start()
    yield r
    await bus.drain()


async def test_resume_positions_on_another_replica(
    nats_server: NatsServer, responder: Responder, tmp_path: Path
) -> None:
    """Replica B has no copy of A's run: it replays JetStream's, and refuses the same ids."""
    async with gateway(nats_server, tmp_path / "a") as a, gateway(nats_server, tmp_path / "b") as b:
        _, key_a = await a.keys.create("acme", "pro")
        _, key_b = await b.keys.create("acme", "pro")
        async with httpx.AsyncClient() as c:
            r = await c.post(f"{a.url}/chat", json={"chatId": "c1", "text": "hello"}, headers=a.auth(key_a))
            rid = r.headers["x-request-id"]
            ids, names = _ids_and_events(r.text)
            assert names[-1] == "done"
            last = int(ids[-1])
            path = f"{b.url}/v1/streams/{rid}"
            for bad in BAD_IDS:
                assert_error(await c.get(path, headers={**b.auth(key_b), "Last-Event-ID": bad}), 400, "bad_request")
            r = await c.get(path, headers={**b.auth(key_b), "Last-Event-ID": str(last + 1)})
            assert_error(r, 400, "bad_request")
            assert "past the stream's end" in r.json()["error"]["message"]
            r = await c.get(path, headers={**b.auth(key_b), "Last-Event-ID": "1"})
            assert r.status_code == 200
            got_ids, got_names = _ids_and_events(r.text)
            assert got_ids == [str(i) for i in range(2, last + 1)] and got_names.count("done") == 1
            r = await c.get(path, headers={**b.auth(key_b), "Last-Event-ID": str(last)})
            assert r.status_code == 200 and parse(r.text) == []
