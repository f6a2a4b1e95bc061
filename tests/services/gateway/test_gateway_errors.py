"""Bad input: every case in the one error shape with its status, and nothing published."""

from __future__ import annotations

import httpx
import pytest
import structlog

from switchyard.services.gateway import app as app_module
from tests.services.gateway.harness import Gateway, Responder

CHAT = {"chatId": "c1", "text": "hello"}


def _shape(r: httpx.Response, status: int, code: str) -> dict[str, str]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"type", "code", "message"}
    assert err["code"] == code and err["message"]
    assert r.headers.get("x-request-id")
    return dict(err)


@pytest.mark.parametrize(
    ("content", "ctype", "status", "code"),
    [
        (b"{not json", "application/json", 400, "bad_request"),
        (b"", "application/json", 400, "bad_request"),
        (b"[1, 2]", "application/json", 400, "bad_request"),
        (b'{"chatId": "c1"}', "application/json", 400, "bad_request"),  # missing text
        (b'{"text": "hi"}', "application/json", 400, "bad_request"),  # missing chatId
        (b'{"chatId": "c1", "text": "   "}', "application/json", 400, "bad_request"),  # empty text
        (b'{"chatId": "c1", "text": 5}', "application/json", 400, "bad_request"),
        (b'{"chatId": "bad id!", "text": "hi"}', "application/json", 400, "bad_request"),
        (b'{"chatId": "c1", "text": "\xff\xfe"}', "application/json", 400, "bad_request"),  # invalid UTF-8
        (b'{"chatId": "c1", "text": "\\ud800"}', "application/json", 400, "bad_request"),  # lone surrogate
        (b'{"chatId": "c1", "text": "hi"}', "text/plain", 415, "unsupported_media_type"),
        (b'{"chatId": "c1", "text": "hi"}', "", 415, "unsupported_media_type"),
        (b'{"chatId": "c1", "text": "hi", "temperature": 9}', "application/json", 400, "bad_request"),
    ],
)
async def test_bad_chat_input(
    gw: Gateway, responder: Responder, content: bytes, ctype: str, status: int, code: str
) -> None:
    n = len(responder.works)
    headers = {**gw.auth(), "content-type": ctype}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/chat", content=content, headers=headers)
    err = _shape(r, status, code)
    assert err["type"] == ("invalid_request_error")
    assert len(responder.works) == n


async def test_too_large(gw: Gateway, responder: Responder) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        big = {"chatId": "c1", "text": "x" * (gw.settings.max_body_bytes + 10)}
        _shape(await c.post("/chat", json=big, headers=gw.auth()), 413, "payload_too_large")

        # Without Content-Length (chunked), the limit holds while reading.
        async def chunks():  # type: ignore[no-untyped-def]
            yield b'{"chatId": "c1", "text": "'
            for _ in range(20):
                yield b"y" * 100_000
            yield b'"}'

        r = await c.post("/chat", content=chunks(), headers={**gw.auth(), "content-type": "application/json"})
        _shape(r, 413, "payload_too_large")
        long_text = {"chatId": "c1", "text": "z" * (gw.settings.max_text_chars + 1)}
        _shape(await c.post("/chat", json=long_text, headers=gw.auth()), 413, "payload_too_large")
    assert len(responder.works) == n


async def test_auth_failures(gw: Gateway, responder: Responder) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        err = _shape(await c.post("/chat", json=CHAT), 401, "unauthorized")
        assert err["type"] == "authentication_error"
        _shape(await c.post("/chat", json=CHAT, headers={"Authorization": "Bearer sy-wrong"}), 401, "unauthorized")
        _shape(await c.post("/chat", json=CHAT, headers={"Authorization": "Basic abc"}), 401, "unauthorized")
        _shape(await c.get("/v1/models", headers={"x-api-key": "nope"}), 401, "unauthorized")
        assert (await c.get("/v1/models", headers={"x-api-key": gw.pro_key})).status_code == 200
    assert len(responder.works) == n


async def test_unknown_route_and_method(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        _shape(await c.get("/nope", headers=gw.auth()), 404, "not_found")
        _shape(await c.get("/v1/chat/completions/x"), 404, "not_found")
        r = await c.get("/chat", headers=gw.auth())
        assert r.status_code == 405 and r.json()["error"]["code"] == "bad_request"


async def test_openai_and_anthropic_bad_input(gw: Gateway, responder: Responder) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        bad = [
            {"model": "SmolLM2-135M-Instruct"},
            {"model": "SmolLM2-135M-Instruct", "messages": []},
            {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "assistant", "content": "hi"}]},
            {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "hi"}], "n": 9},
        ]
        for body in bad:
            _shape(await c.post("/v1/chat/completions", json=body, headers=gw.auth()), 400, "bad_request")
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]},
            headers=gw.auth(),
        )
        _shape(r, 404, "not_found")
        r = await c.post("/v1/messages", json={"model": "SmolLM2-135M-Instruct", "messages": []}, headers=gw.auth())
        assert r.status_code == 400
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert len(responder.works) == n


async def test_crash_is_500_in_the_error_shape_with_request_id(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom(raw: str) -> None:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(gw.keys, "verify", boom)
    # structlog's default dev renderer draws a rich traceback with locals, which takes seconds here.
    monkeypatch.setattr(app_module, "log", structlog.get_logger().bind())
    monkeypatch.setattr(app_module.log, "exception", lambda *a, **k: None)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/v1/models", headers=gw.auth())
    err = _shape(r, 500, "internal")
    assert "fire" not in err["message"]  # internals stay in the log
