"""The bad-input cases that used to crash or slip through (issue 17): each gets the one error shape and
its status, and nothing reaches the pipeline or a store."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import structlog

from switchyard.services.gateway import app as app_module
from switchyard.services.gateway.body import MAX_JSON_DEPTH
from switchyard.services.gateway.product.files_api import MAX_FILE_TEXT_BYTES
from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def shape(r: httpx.Response, status: int, code: str, *, anthropic: bool = False) -> dict[str, str]:
    assert r.status_code == status, r.text
    body = r.json()
    if anthropic:
        assert body["type"] == "error" and set(body) == {"type", "error"}, body
    else:
        assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"type", "code", "message"} and err["code"] == code and err["message"], err
    assert r.headers.get("x-request-id")
    return dict(err)


def openai(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, **kw}


def anthropic(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "messages": USER, **kw}


def nested(depth: int) -> bytes:
    return b'{"chatId": "c1", "text": "hi", "x": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [100_000, MAX_JSON_DEPTH + 1])
@pytest.mark.parametrize("route", ["/chat", "/v1/chat/completions", "/v1/messages", "/v1/conversations"])
async def test_deeply_nested_json_is_400(gw: Gateway, responder: Responder, route: str, depth: int) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(route, content=nested(depth), headers={**gw.auth(), "content-type": "application/json"})
    err = shape(r, 400, "bad_request", anthropic=route == "/v1/messages")
    assert "nested deeper" in err["message"]
    assert len(responder.works) == n


async def test_json_within_the_depth_limit_is_taken(gw: Gateway) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"a": {"b": {"c": {"d": [[[1]]]}}}}}}]
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai(tools=tools), headers=gw.auth())
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("route", "body", "anthropic_shape"),
    [
        ("/v1/chat/completions", openai(seed=2**70), False),
        ("/v1/chat/completions", openai(seed=2**70, stream=True), False),
        ("/v1/chat/completions", openai(seed=-1), False),
        ("/chat", {"chatId": "c1", "text": "hi", "seed": 2**70}, False),
        ("/v1/chat/completions", openai(model=""), False),
        ("/v1/messages", anthropic(model=""), True),
        ("/v1/chat/completions", openai(max_tokens=0), False),
        ("/v1/chat/completions", openai(max_completion_tokens=0, max_tokens=50), False),
        ("/v1/messages", anthropic(max_tokens=0), True),
        ("/chat", {"chatId": "c1", "text": "hi", "max_tokens": 0}, False),
        ("/v1/chat/completions", openai(stream="yes"), False),
        ("/v1/chat/completions", openai(stream=1), False),
        ("/v1/chat/completions", openai(stream=True, stream_options={"include_usage": "yes"}), False),
        ("/v1/messages", anthropic(stream="yes"), True),
        ("/v1/chat/completions", openai(tool_choice="sometimes"), False),
        ("/v1/chat/completions", openai(tools=TOOLS, tool_choice="sometimes"), False),
        ("/v1/chat/completions", openai(tool_choice={"type": "function", "function": {"name": "f"}}), False),
        ("/v1/chat/completions", openai(tool_choice={"type": "banana"}), False),
    ],
)
async def test_bad_parameters_are_400(
    gw: Gateway, responder: Responder, route: str, body: dict[str, Any], anthropic_shape: bool
) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(route, json=body, headers=gw.auth(gw.pro_key))
    shape(r, 400, "bad_request", anthropic=anthropic_shape)
    assert len(responder.works) == n


async def test_edge_values_still_pass(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai(seed=2**63 - 1, max_tokens=1), headers=gw.auth())
        assert r.status_code == 200, r.text
        assert responder.works[-1].sampling.seed == 2**63 - 1 and responder.works[-1].sampling.max_tokens == 1
        r = await c.post("/v1/chat/completions", json=openai(tool_choice="auto"), headers=gw.auth())
        assert r.status_code == 200, r.text


def _upload(text: bytes) -> dict[str, tuple[str, bytes, str]]:
    return {"file": ("notes.txt", text, "text/plain")}


@pytest.mark.parametrize("megabytes", [3, 9])
async def test_large_text_upload_is_413_naming_the_limit(gw: Gateway, megabytes: int) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        r = await c.post("/v1/files", files=_upload(b"word " * (megabytes * 1024 * 1024 // 5)), headers=gw.auth())
    err = shape(r, 413, "payload_too_large")
    assert str(MAX_FILE_TEXT_BYTES) in err["message"]


async def test_text_that_escapes_large_is_413_too(gw: Gateway) -> None:
    # Under the limit in raw bytes, over it as the JSON string the bus carries (each \x01 is six bytes).
    async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
        r = await c.post("/v1/files", files=_upload(b"a" + b"\x01" * (MAX_FILE_TEXT_BYTES // 4)), headers=gw.auth())
    shape(r, 413, "payload_too_large")


async def test_reinstating_an_unknown_key_is_404_and_writes_nothing(gw: Gateway) -> None:
    admin = gw.auth(gw.admin_key)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        for key_id in ("key_doesnotexist0000", "key_0123456789abcdef"):
            shape(await c.post(f"/v1/admin/keys/{key_id}/reinstate", headers=admin), 404, "not_found")
        # Not a key id at all (the bucket could not even name it): refused at the edge.
        shape(await c.post("/v1/admin/keys/clé-ünïcode/reinstate", headers=admin), 400, "bad_request")
        listed = (await c.get("/v1/admin/keys/standing", headers=admin)).json()["data"]
        assert not [s for s in listed if s["key_id"] in ("key_doesnotexist0000", "key_0123456789abcdef")]
        r = await c.post(f"/v1/admin/keys/{gw.free_key_id}/reinstate", headers=admin)
        assert r.status_code == 200 and r.json()["key_id"] == gw.free_key_id and r.json()["state"] == "active"


async def test_405_names_the_allowed_methods(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/chat", headers=gw.auth())
        shape(r, 405, "bad_request")
        assert r.headers["allow"] == "POST"
        r = await c.put("/v1/files", headers=gw.auth())
        shape(r, 405, "bad_request")
        assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


async def test_crash_on_messages_uses_the_anthropic_wrapper(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    async def boom(raw: str) -> None:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(gw.keys, "verify", boom)
    monkeypatch.setattr(app_module, "log", structlog.get_logger().bind())
    monkeypatch.setattr(app_module.log, "exception", lambda *a, **k: None)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/messages", json=anthropic(), headers=gw.auth())
    err = shape(r, 500, "internal", anthropic=True)
    assert err["type"] == "api_error" and "fire" not in err["message"]


async def test_a_request_over_the_input_budget_is_413_before_any_stage(gw: Gateway, responder: Responder) -> None:
    """Too many messages, or too many characters over all of them: refused before any stage reads a word."""
    settings = gw.settings
    before = len(responder.works)
    many = [{"role": "user", "content": "hi"}] * (settings.max_messages + 1)
    line = "word " * (settings.max_text_chars // 5 - 1)  # each message under the per-message limit
    long = [{"role": "user", "content": line}] * (settings.max_input_chars // len(line) + 1)
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth(gw.pro_key), timeout=30) as c:
        for messages, limit in ((many, settings.max_messages), (long, settings.max_input_chars)):
            r = await c.post("/v1/chat/completions", json={"model": "SmolLM2-135M-Instruct", "messages": messages})
            err = shape(r, 413, "payload_too_large")
            assert str(limit) in err["message"]
            r = await c.post(
                "/v1/messages", json={"model": "SmolLM2-135M-Instruct", "max_tokens": 8, "messages": messages}
            )
            assert r.status_code == 413 and str(limit) in r.json()["error"]["message"]
    assert len(responder.works) == before
