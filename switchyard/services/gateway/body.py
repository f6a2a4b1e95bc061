"""Reading a body strictly: its size (the `BodyLimit` middleware), then type, encoding and shape each fail
with their own status, before anything is published or stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError

M = TypeVar("M", bound=BaseModel)

# Deeper than any request we take (a tool's parameter schema nests a handful of levels); deeper values
# would reach recursion limits later, in validation or when the work is encoded for the bus.
MAX_JSON_DEPTH = 64


class BodyLimit:
    """ASGI middleware: a body over its route's limit (`limit_for(path)`) is refused with 413, at once when
    Content-Length declares it, else as soon as the bytes read pass it (a chunked body cannot exhaust memory
    either). It is raised from `receive`, so inside whatever reads the body: a handler's dependencies check
    the key first, and the refusal goes through the one error handler."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]):
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = Headers(scope=scope).get("content-length")
        declared_too_big = declared is not None and declared.isdigit() and int(declared) > limit
        received = 0
        reading = True

        async def limited() -> Message:
            nonlocal received, reading
            if reading and declared_too_big:
                raise ApiError(ErrorCode.payload_too_large, f"request body over {limit} bytes")
            message = await receive()
            if reading and message["type"] == "http.request":
                received += len(message.get("body", b""))
                reading = message.get("more_body", False)
                if received > limit:
                    raise ApiError(ErrorCode.payload_too_large, f"request body over {limit} bytes")
            return message

        await self.app(scope, limited, send)


async def read_body(request: Request) -> bytes:
    """The whole body; its size was limited by `BodyLimit` on the way in."""
    try:
        return await request.body()
    except ClientDisconnect as e:
        raise ApiError(ErrorCode.cancelled, "client went away while sending the request") from e


def _check_content_type(request: Request) -> None:
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(ErrorCode.unsupported_media_type, f"expected Content-Type application/json, got {ctype!r}")


def too_deep(value: object, limit: int) -> bool:
    """Whether arrays and objects nest deeper than `limit`; walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


async def read_json(request: Request, model: type[M]) -> M:
    _check_content_type(request)
    raw = await read_body(request)
    if not raw.strip():
        raise ApiError(ErrorCode.bad_request, "empty request body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(ErrorCode.bad_request, f"request body is not valid UTF-8 (byte {e.start})") from e
    data = json_object(text, "request body")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        # FastAPI's own exception: its one handler words every validation error alike.
        raise RequestValidationError(e.errors()) from e


def has_body(request: Request) -> bool:
    return request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers


class JsonBody:
    """What `json_body` depends on: the reader, and the model it reads, which the API document names as the
    operation's request body (openapi.py finds it among the route's dependencies)."""

    def __init__(self, model: type[BaseModel], optional: bool):
        self.model = model
        self.optional = optional

    async def __call__(self, request: Request) -> Any:
        if self.optional and not has_body(request):
            return self.model()
        return await read_json(request, self.model)


def json_body(model: type[M], *, optional: bool = False) -> Any:
    """A dependency that reads the body as `model` (`Annotated[Model, json_body(Model)]`); `optional`: a
    request without a body gets the model's defaults. Put it after the key in a handler's parameters:
    dependencies resolve in order, so an unauthenticated request is refused before its body is read."""
    return Depends(JsonBody(model, optional))


def json_object(text: str, what: str) -> dict[str, Any]:
    """`text` as a JSON object no deeper than MAX_JSON_DEPTH, or a 400 naming what is wrong with `what`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(ErrorCode.bad_request, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except RecursionError as e:
        raise ApiError(ErrorCode.bad_request, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from e
    if too_deep(data, MAX_JSON_DEPTH):
        raise ApiError(ErrorCode.bad_request, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(data, dict):
        raise ApiError(ErrorCode.bad_request, f"{what} must be a JSON object")
    return data
