"""WebSocket mode: `GET /v1/responses` with an Upgrade (Open Responses, OpenAI's Responses WebSocket mode).

The key goes on the upgrade request as on any HTTP request (`Authorization: Bearer`, or `x-api-key`); a
refused key gets its 401/403 in the one error shape as the upgrade's answer. Then each text message the
client sends is one `response.create` (the create body plus `type`; no `stream`, `stream_options` or
`background`), and the server sends back the same events the SSE stream carries, one JSON message each, one
response at a time. A turn that cannot start gets an error envelope (`{"type": "error", "status", "error":
{type, code, message, param}}`) and the connection stays open for the next.

`store: false` responses live only on their connection: the latest one is kept there, so a
`previous_response_id` naming it continues it with only the new input; any other id not in the store is
`previous_response_not_found`, and a continuation that fails evicts the response it named. Close codes:
1000 at the connection's age limit (after `websocket_connection_limit_reached`), 1009 for a message over the
size limit, 1003 for a binary message, 1011 when the gateway itself fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import msgspec
import structlog
from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from switchyard.libs.bus import BusError
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.auth import authenticate
from switchyard.services.gateway.body import json_object
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError, error_response, status_of
from switchyard.services.gateway.responses.create import (
    Continued,
    PreviousResponseNotFound,
    continued_from,
    start_response,
)
from switchyard.services.gateway.responses.request import ResponsesRequest
from switchyard.services.gateway.runs.relay import follow

log = structlog.get_logger()
_json = msgspec.json.Encoder().encode
ROUTE = "WEBSOCKET /v1/responses"
# Fields of the HTTP transport a WebSocket `response.create` must not carry.
HTTP_ONLY = ("stream", "stream_options", "background")


class Closing(Exception):
    """The connection ends after this turn's error: (close code, reason)."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code


def envelope(e: BusError) -> dict[str, Any]:
    info = e.info()
    code = PreviousResponseNotFound.OPEN_CODE if isinstance(e, PreviousResponseNotFound) else str(info.code)
    param = "previous_response_id" if isinstance(e, PreviousResponseNotFound) else None
    if isinstance(e, ApiError) and e.details.get("param"):
        param = str(e.details["param"])
    error = {"type": info.type, "code": code, "message": info.message, "param": param}
    return {"type": "error", "status": status_of(e), "error": error}


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg", "invalid")))
    return "invalid response.create: " + "; ".join(parts)


def read_create(raw: str) -> ResponsesRequest:
    """One client message as the create request it must be, or a 400 naming what is wrong."""
    data = json_object(raw, "a message")
    kind = data.pop("type", None)
    if kind != "response.create":
        shown = kind if isinstance(kind, str) else json.dumps(kind)
        raise ApiError(ErrorCode.bad_request, f"unknown message type {shown[:64]!r}: send response.create")
    sent = [k for k in HTTP_ONLY if k in data]
    if sent:
        raise ApiError(
            ErrorCode.bad_request, f"{', '.join(sent)}: HTTP fields, not sent in WebSocket mode (it always streams)"
        )
    try:
        return ResponsesRequest.model_validate(data)
    except ValidationError as e:
        raise ApiError(ErrorCode.bad_request, _validation_message(e)) from e


class Session:
    """One connection: its key, the response it keeps for `store: false` continuation, its age limit."""

    def __init__(self, gw: Gateway, websocket: WebSocket, key: Any):
        self.gw = gw
        self.ws = websocket
        self.key = key
        self.kept: Continued | None = None
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + gw.settings.responses_socket_max_s

    async def send(self, data: dict[str, Any]) -> None:
        await self.ws.send_text(_json(data).decode())

    async def next_message(self) -> str | None:
        """The next text message; None when the client has gone."""
        remaining = self.deadline - asyncio.get_running_loop().time()
        try:
            message = await asyncio.wait_for(self.ws.receive(), max(remaining, 0.001))
        except TimeoutError:
            await self.send(
                {
                    "type": "error",
                    "status": 400,
                    "error": {
                        "type": "invalid_request_error",
                        "code": "websocket_connection_limit_reached",
                        "message": f"this connection reached its limit of {self.gw.settings.responses_socket_max_s:g} s:"
                        " open a new one",
                        "param": None,
                    },
                }
            )
            raise Closing(1000, "connection limit reached") from None
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        if text is None:
            raise Closing(1003, "send response.create as a text message")
        limit = self.gw.settings.max_body_bytes
        if len(text) > limit and len(text.encode()) > limit:
            await self.send(envelope(ApiError(ErrorCode.payload_too_large, f"message over {limit} bytes")))
            raise Closing(1009, f"message over {limit} bytes")
        return str(text)

    async def turn(self, raw: str) -> None:
        """One response.create, to its last event; a refusal is an error envelope."""
        previous: str | None = None
        try:
            body = read_create(raw)
            previous = body.previous_response_id
            continued = self.kept if self.kept is not None and self.kept.response_id == previous else None
            rid = uuid.uuid4().hex
            with structlog.contextvars.bound_contextvars(rid=rid):
                started = await start_response(self.gw, self.ws, self.key, body, rid, route=ROUTE, continued=continued)
                await self._stream(started)
        except BusError as e:
            if previous is not None and self.kept is not None and self.kept.response_id == previous:
                self.kept = None  # a failed continuation evicts what it continued
            await self.send(envelope(e))
            return
        response = started.encoder.fold.response
        if response.get("status") in ("completed", "incomplete") and not body.store:
            self.kept = continued_from(started, response)
        elif previous is not None and self.kept is not None and self.kept.response_id == previous:
            self.kept = None

    async def _stream(self, started: Any) -> None:
        encoder = started.encoder
        items = follow(self.gw, [started.run])
        first = True
        try:
            async for batch in items:
                for _, _, event in batch:
                    if first and event.type == "error" and event.error is not None:
                        # Refused before anything was written (input safety, a limit): its real status.
                        raise ApiError(event.error.code, event.error.message)
                    if first:
                        for e in encoder.begin():
                            await self.send(e)
                        first = False
                    for e in encoder.on(event):
                        await self.send(e)
        finally:
            # Closing the reader detaches it: a run nobody reads any more (the client left) is cancelled.
            await items.aclose()  # type: ignore[attr-defined]


async def responses_socket(websocket: WebSocket) -> None:
    gw: Gateway = websocket.app.state.gateway
    try:
        key = await authenticate(websocket, gw)
    except BusError as e:
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(error_response(e))
        else:
            await websocket.close(code=1008, reason=e.message[:120])
        return
    await websocket.accept()
    session = Session(gw, websocket, key)
    code, reason = 1000, ""
    try:
        while (raw := await session.next_message()) is not None:
            await session.turn(raw)
    except Closing as e:
        code, reason = e.code, str(e)
    except WebSocketDisconnect:
        return
    except Exception:
        log.exception("responses websocket failed")
        code, reason = 1011, "internal error"
    if websocket.client_state is WebSocketState.CONNECTED:
        with contextlib.suppress(Exception):
            await websocket.close(code=code, reason=reason)
