"""Bad input against the real stack: the one error shape, the right status, nothing stored changes."""

from __future__ import annotations

import contextlib
import io
import uuid

import httpx

from switchyard.cli.keys import main as keys_main
from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from tests.e2e.conftest import chat


def shape(r: httpx.Response, status: int, code: str | None = None) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and {"type", "code", "message"} <= set(body["error"]), body
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code
    assert r.headers.get("x-request-id")


def test_bad_requests_change_nothing(client: httpx.Client, stack: Stack) -> None:
    chat_id = f"c-{uuid.uuid4().hex[:8]}"
    evs, _ = chat(client, chat_id, "Hello there.")
    assert evs[-1].event == "done"
    before = client.get(f"/v1/conversations/{chat_id}").json()

    hdr = {"content-type": "application/json"}
    shape(client.post("/chat", content=b'{"chatId": "x", "text": ', headers=hdr), 400)
    shape(client.post("/chat", json={"chatId": chat_id}), 400)
    shape(client.post("/chat", json={"text": "no chat"}), 400)
    shape(client.post("/chat", json={"chatId": chat_id, "text": ""}), 400)
    shape(client.post("/chat", json={"chatId": chat_id, "text": "   "}), 400)
    shape(client.post("/chat", json={"chatId": chat_id, "text": "x" * 2_000_000}), 413)
    shape(client.post("/chat", content=b'{"chatId": "a", "text": "\xff\xfe"}', headers=hdr), 400)
    shape(client.post("/chat", content=b"chatId=a&text=b", headers={"content-type": "text/plain"}), 415)
    shape(httpx.post(f"{stack.url}/chat", json={"chatId": chat_id, "text": "hi"}), 401)
    shape(
        httpx.post(
            f"{stack.url}/chat", json={"chatId": chat_id, "text": "hi"}, headers={"Authorization": "Bearer sy-wrong"}
        ),
        401,
    )
    shape(httpx.get(f"{stack.url}/v1/admin/requests/x", headers={"Authorization": f"Bearer {stack.api_key}"}), 403)

    after = client.get(f"/v1/conversations/{chat_id}").json()
    assert after == before


def test_another_tenants_chat_is_its_own(client: httpx.Client, stack: Stack) -> None:
    """Chat ids are per tenant: another tenant never sees this chat, and the same id is its own chat."""
    chat_id = f"c-{uuid.uuid4().hex[:8]}"
    evs, _ = chat(client, chat_id, "Hello there.")
    assert evs[-1].event == "done"
    before = client.get(f"/v1/conversations/{chat_id}").json()
    out = io.StringIO()
    db = database_url(None, str(stack.data_dir), "gateway")
    with contextlib.redirect_stdout(out):
        assert keys_main(["--database-url", db, "create", "--tenant", "other", "--tier", "free"]) == 0
    other_key = next(w for w in out.getvalue().split() if w.startswith("sy-"))
    other = {"Authorization": f"Bearer {other_key}"}
    shape(httpx.get(f"{stack.url}/v1/conversations/{chat_id}", headers=other), 404, "not_found")
    theirs = httpx.post(f"{stack.url}/chat", json={"chatId": chat_id, "text": "let me in"}, headers=other, timeout=120)
    assert theirs.status_code == 200 and "event: done" in theirs.text
    assert client.get(f"/v1/conversations/{chat_id}").json() == before
    own = httpx.get(f"{stack.url}/v1/conversations/{chat_id}", headers=other).json()
    assert [t["user_text"] for t in own["turns"]] == ["let me in"]


def test_inputs_that_used_to_crash_are_400_404_413(client: httpx.Client, stack: Stack) -> None:
    """Each of these answered 500 against the real stack (issue 17); nothing of them may reach the pipeline."""
    hdr = {"content-type": "application/json"}
    deep = b'{"chatId": "deep", "text": "hi", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    shape(client.post("/chat", content=deep, headers=hdr), 400, "bad_request")
    user = [{"role": "user", "content": "hi"}]
    model = "SmolLM2-135M-Instruct"
    shape(client.post("/v1/chat/completions", json={"model": model, "messages": user, "seed": 2**70}), 400)
    shape(client.post("/v1/chat/completions", json={"model": "", "messages": user}), 400)
    shape(client.post("/v1/chat/completions", json={"model": model, "messages": user, "max_tokens": 0}), 400)
    shape(client.post("/v1/chat/completions", json={"model": model, "messages": user, "stream": "yes"}), 400)
    shape(client.post("/v1/chat/completions", json={"model": model, "messages": user, "tool_choice": "maybe"}), 400)
    r = client.post("/v1/messages", json={"model": "", "max_tokens": 8, "messages": user})
    assert r.status_code == 400 and r.json()["type"] == "error" and r.json()["error"]["code"] == "bad_request"
    big = {"file": ("big.txt", b"word " * (3 * 1024 * 1024 // 5), "text/plain")}
    r = client.post("/v1/files", files=big)
    shape(r, 413, "payload_too_large")
    assert "524288" in r.json()["error"]["message"]
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    shape(httpx.post(f"{stack.url}/v1/admin/keys/key_0000000000000000/reinstate", headers=admin), 404, "not_found")
    shape(httpx.post(f"{stack.url}/v1/admin/keys/ключ/reinstate", headers=admin), 400, "bad_request")
    r = client.get("/chat")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    doc = httpx.get(f"{stack.url}/openapi.json").json()
    assert "/v1/chat/completions" in doc["paths"]
