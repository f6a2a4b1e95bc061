"""Issue 28, item 1: a client id never acts as a NATS wildcard or separator. `GET /v1/streams/%3E` once
subscribed to `chat.events.>` and read another tenant's answer; every route that takes an id now refuses
such an id (400), and a well-formed id of another tenant stays 404."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.security.conftest import assert_error, assert_healthy

# Raw path segments, sent as written (httpx would resolve `.` itself): wildcards, separators, whitespace,
# control characters, too long, and their URL-encoded forms.
BAD_IDS = [
    ">",
    "%3E",
    "*",
    "%2A",
    "%2a",
    "a.b",
    "%2E",
    "a%2Eb",
    "a%20b",
    "a%09b",
    "a%0Ab",
    "a%0Db",
    "%00",
    "x" * 65,
    "a*",
    "chat.events.%3E",
]
ID_ROUTES = [
    ("GET", "/v1/streams/{id}"),
    ("POST", "/v1/streams/{id}/cancel"),
    ("GET", "/v1/files/{id}"),
    ("DELETE", "/v1/files/{id}"),
    ("DELETE", "/v1/memory/{id}"),
    ("GET", "/v1/responses/{id}"),
    ("DELETE", "/v1/responses/{id}"),
    ("POST", "/v1/responses/{id}/cancel"),
]
CHAT_ROUTES = [
    ("GET", "/v1/conversations/{id}"),
    ("PATCH", "/v1/conversations/{id}"),
    ("DELETE", "/v1/conversations/{id}"),
]
ADMIN_ROUTES = [
    ("GET", "/v1/admin/requests/{id}"),
    ("POST", "/v1/admin/replay/{id}"),
    ("POST", "/v1/admin/keys/{id}/reinstate"),
]


def send(c: httpx.Client, method: str, path: str, **kw: object) -> httpx.Response:
    # The path goes out byte for byte: no normalisation of `.` or of percent-escapes.
    url = httpx.URL(str(c.base_url).rstrip("/"), raw_path=path.encode())  # type: ignore[arg-type]
    req = c.build_request(method, url, **kw)  # type: ignore[arg-type]
    return c.send(req)


@pytest.mark.parametrize(("method", "route"), ID_ROUTES + CHAT_ROUTES)
def test_a_wildcard_or_separator_id_is_refused(attacker: httpx.Client, method: str, route: str) -> None:
    # Chat ids are the client's own names and may hold `.` (never a subject token: they travel in bodies).
    chat_ok = ("a.b", "a%2Eb", "x" * 65, "chat.events.%3E")
    bad = BAD_IDS if (method, route) not in CHAT_ROUTES else [b for b in BAD_IDS if b not in chat_ok] + ["x" * 129]
    for raw in bad:
        kw = {"json": {"title": "x"}} if method == "PATCH" else {}
        r = send(attacker, method, route.format(id=raw), **kw)
        # 400 for a malformed id; 404 where the router itself finds no route (a `/` or an empty segment).
        assert_error(r, (400, 404))
        assert r.status_code != 404 or r.json()["error"]["message"] == "no such route", (raw, r.text)


@pytest.mark.parametrize(("method", "route"), ADMIN_ROUTES)
def test_admin_routes_refuse_a_wildcard_id(stack: Stack, method: str, route: str) -> None:
    with httpx.Client(base_url=stack.url, timeout=30, headers={"Authorization": f"Bearer {stack.admin_key}"}) as admin:
        for raw in BAD_IDS:
            assert_error(send(admin, method, route.format(id=raw)), 400, "bad_request")


def test_empty_ids_find_no_route(attacker: httpx.Client) -> None:
    for method, route in ID_ROUTES:
        r = send(attacker, method, route.format(id=""))
        # No id route matches: 404/405, or Starlette's redirect of `/v1/files/` to the key's own `/v1/files`.
        assert r.status_code in (307, 404, 405), (route, r.status_code, r.text[:300])
        assert "event:" not in r.text


def test_a_wildcard_stream_id_reads_no_one_elses_answer(client: httpx.Client, attacker: httpx.Client) -> None:
    """The reproduction: while the dev tenant's answer streams, the attacker asks for `>` and `*` streams."""
    done = threading.Event()
    result: dict[str, object] = {}

    def victim() -> None:
        with client.stream(
            "POST",
            "/chat",
            json={"chatId": f"v-{uuid.uuid4().hex[:8]}", "text": "Count from one to twenty.", "max_tokens": 48},
        ) as resp:
            result["rid"] = resp.headers.get("x-request-id")
            result["body"] = resp.read().decode()
        done.set()

    t = threading.Thread(target=victim)
    t.start()
    try:
        while not done.is_set():
            for raw in ("%3E", "*", "%2A", "chat.%3E"):
                r = send(attacker, "GET", f"/v1/streams/{raw}")
                assert r.status_code == 400, (raw, r.status_code, r.text[:300])
                assert "delta" not in r.text
            done.wait(0.05)
    finally:
        t.join(60)
    rid = result["rid"]
    assert isinstance(rid, str) and "event: done" in str(result["body"])
    # The victim's real rid is well-formed: another tenant gets 404, as before.
    assert_error(attacker.get(f"/v1/streams/{rid}"), 404, "not_found")
    assert_error(attacker.post(f"/v1/streams/{rid}/cancel"), 404, "not_found")
    assert_healthy(client)


def test_bad_ids_in_bodies_are_400(client: httpx.Client) -> None:
    for rid in (">", "*", "a.b", "a b", ""):
        assert_error(client.post("/v1/feedback", json={"rid": rid, "rating": "up"}), 400, "bad_request")
        body = {"chatId": "demo", "text": "hi", "fileIds": [rid]}
        assert_error(client.post("/chat", json=body), 400, "bad_request")
    for chat_id in (">", "*", "a b", "a\nb", "", "x" * 129):
        assert_error(client.post("/chat", json={"chatId": chat_id, "text": "hi"}), 400, "bad_request")
        assert_error(client.get("/v1/files", params={"chatId": chat_id or " "}), 400, "bad_request")
    # What clients legitimately send still works: a named chat, with `.` and `:` as before.
    r = client.post("/v1/conversations", json={"chatId": "demo.support:1"})
    assert r.status_code == 201, r.text
    assert client.get("/v1/conversations/demo.support:1").status_code == 200
