"""WebSocket mode (`GET /v1/responses` with an Upgrade) through a real WebSocket client (`websockets`) on the
scripted pipeline: the key on the upgrade, the same events as the SSE stream, one response at a time,
`store: false` continuation on the connection, the error envelope, the bounds and close codes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from switchyard.libs.bus import NatsServer
from tests.services.gateway.harness import Gateway, Responder, gateway
from tests.services.gateway.responses.test_responses_api import EVENTS, MODEL, OPEN_EVENT, _raw_stream
from tests.wait import wait_for

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _url(gw: Gateway) -> str:
    return gw.url.replace("http://", "ws://") + "/v1/responses"


@pytest.fixture
async def ws(gw: Gateway) -> AsyncIterator[ClientConnection]:
    async with connect(_url(gw), additional_headers=gw.auth(), open_timeout=10) as socket:
        yield socket


async def turn(socket: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    """One response.create and every message back to its terminal event (or an error envelope)."""
    await socket.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
    got: list[dict[str, Any]] = []
    while True:
        message = json.loads(await socket.recv())
        got.append(message)
        if message["type"] in TERMINAL or message["type"] == "error":
            return got


async def test_a_refused_key_gets_its_status_on_the_upgrade(gw: Gateway) -> None:
    for headers, status in (({}, 401), ({"Authorization": "Bearer sy-nope"}, 401)):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(_url(gw), additional_headers=headers, open_timeout=10):
                pass
        assert refused.value.response.status_code == status
        assert set(json.loads(refused.value.response.body or b"{}")["error"]) == {"type", "code", "message"}


async def test_the_same_events_as_the_sse_stream(gw: Gateway, ws: ClientConnection) -> None:
    events = await turn(ws, input="hello", store=False)
    for e in events:
        EVENTS.validate_python(e)  # the OpenAI SDK's own event types
        OPEN_EVENT.validate_python(e)  # every field the specification requires
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    sse = await _raw_stream(gw, input="hello", store=False)
    assert [e["type"] for e in events] == [e["type"] for e in sse]
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "Hello"
    # The connection takes the next response.create.
    again = await turn(ws, input="hello again", store=False)
    assert again[-1]["type"] == "response.completed" and again[-1]["response"]["id"] != events[-1]["response"]["id"]


async def test_store_false_continues_on_the_connection(gw: Gateway, ws: ClientConnection, responder: Responder) -> None:
    first = (await turn(ws, input="My code word is cobalt.", store=False))[-1]["response"]
    second = await turn(ws, input="What is my code word?", store=False, previous_response_id=first["id"])
    assert second[-1]["type"] == "response.completed"
    assert second[-1]["response"]["previous_response_id"] == first["id"]
    work = next(w for w in responder.works if w.rid == second[-1]["response"]["id"].removeprefix("resp_"))
    assert [(m.role, m.content) for m in work.messages] == [("user", "My code word is cobalt."), ("assistant", "Hello")]
    assert work.text == "What is my code word?" and work.chat_id is None and not work.persist

    # Another connection does not have it: store: false lives only where it was made.
    async with connect(_url(gw), additional_headers=gw.auth(), open_timeout=10) as other:
        miss = await turn(other, input="again", store=False, previous_response_id=first["id"])
    assert miss == [
        {
            "type": "error",
            "status": 404,
            "error": {
                "type": "not_found_error",
                "code": "previous_response_not_found",
                "message": f"previous response {first['id']!r} not found",
                "param": "previous_response_id",
            },
        }
    ]


async def test_a_failed_continuation_evicts_what_it_continued(ws: ClientConnection) -> None:
    first = (await turn(ws, input="Remember ember.", store=False))[-1]["response"]
    bad = await turn(
        ws,
        store=False,
        previous_response_id=first["id"],
        input=[{"type": "function_call_output", "call_id": "call_missing", "output": "x"}],
    )
    assert bad[-1]["type"] == "error" and bad[-1]["status"] == 400
    assert "call_missing" in bad[-1]["error"]["message"]
    retry = await turn(ws, input="again", store=False, previous_response_id=first["id"])
    assert retry[-1]["error"]["code"] == "previous_response_not_found"
    fresh = await turn(ws, input="start over", store=False)  # the connection still serves a new chain
    assert fresh[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ({"type": "response.create", "model": MODEL, "input": "hi", "stream": True}, "stream"),
        ({"type": "response.create", "model": MODEL, "input": "hi", "background": True}, "background"),
        ({"type": "response.cancel"}, "unknown message type 'response.cancel'"),
        ({"model": MODEL, "input": "hi"}, "send response.create"),
        ({"type": "response.create", "input": "hi"}, "model"),
        (
            {
                "type": "response.create",
                "model": MODEL,
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}],
                    }
                ],
            },
            "takes text only",
        ),
        ("not json", "malformed JSON"),
    ],
)
async def test_bad_messages_get_the_error_envelope_and_the_connection_stays(
    ws: ClientConnection, message: Any, named: str
) -> None:
    await ws.send(message if isinstance(message, str) else json.dumps(message))
    error = json.loads(await ws.recv())
    assert error["type"] == "error" and error["status"] == 400 and named in error["error"]["message"], error
    assert set(error["error"]) == {"type", "code", "message", "param"}
    assert (await turn(ws, input="hello", store=False))[-1]["type"] == "response.completed"


async def test_an_oversized_or_binary_message_closes_the_connection(gw: Gateway) -> None:
    async with connect(_url(gw), additional_headers=gw.auth(), max_size=None) as socket:
        await socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "x" * 1_100_000}))
        error = json.loads(await socket.recv())
        assert error["status"] == 413 and error["error"]["code"] == "payload_too_large"
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    async with connect(_url(gw), additional_headers=gw.auth()) as socket:
        await socket.send(b'{"type": "response.create"}')
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


async def test_a_client_that_leaves_mid_stream_cancels_its_run(gw: Gateway, responder: Responder) -> None:
    async with connect(_url(gw), additional_headers=gw.auth()) as socket:
        await socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "slow one", "store": False}))
        created = json.loads(await socket.recv())
        rid = created["response"]["id"].removeprefix("resp_")
        while json.loads(await socket.recv())["type"] != "response.output_text.delta":
            pass
    await wait_for(lambda: any(n.rid == rid for n in responder.cancels), what="the run to be cancelled")


async def test_the_connection_limit_is_named_then_closed(
    nats_server: NatsServer, responder: Responder, tmp_path: Path
) -> None:
    async with gateway(nats_server, tmp_path, responses_socket_max_s=0.5) as g:
        _, g.pro_key = await g.keys.create("acme", "pro", user="ann")
        async with connect(_url(g), additional_headers=g.auth()) as socket:
            error = json.loads(await socket.recv())
            assert error["type"] == "error" and error["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed) as closed:
                await socket.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
