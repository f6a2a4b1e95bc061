"""One error shape on every route: `{"error": {"type", "code", "message"}}` with the contract's status."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from switchyard.libs.bus import BusError
from switchyard.schemas import ErrorCode, ErrorInfo, http_status


class ApiError(BusError):
    """A `BusError` the gateway raises itself: the same code and message, and where the contract's status
    is not the one it wants, its own; `Retry-After` when the client should wait. A `BusError` from a stage
    needs no mapping: the one handler answers both."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(code, message)
        self.status = status or http_status(code)
        self.retry_after = retry_after
        # Fields added to the error object next to type, code and message (a spent budget's numbers).
        self.details = details or {}


def status_of(e: BusError) -> int:
    return e.status if isinstance(e, ApiError) else http_status(e.code)


def error_body(info: ErrorInfo, *, anthropic: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"error": info.model_dump(mode="json")}
    if anthropic:
        # The Anthropic shape adds a top-level type; the rest is the same object.
        body = {"type": "error", **body}
    return body


def error_response(e: BusError, path: str = "", headers: dict[str, str] | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if isinstance(e, ApiError) and e.retry_after is not None:
        headers["Retry-After"] = str(max(1, int(e.retry_after + 0.999)))
    body = error_body(e.info(), anthropic=path.startswith("/v1/messages"))
    if isinstance(e, ApiError) and e.details:
        body["error"] = {**e.details, **body["error"]}
    return JSONResponse(body, status_code=status_of(e), headers=headers)


_BY_STATUS = {
    400: ErrorCode.bad_request,
    401: ErrorCode.unauthorized,
    403: ErrorCode.forbidden,
    404: ErrorCode.not_found,
    413: ErrorCode.payload_too_large,
    415: ErrorCode.unsupported_media_type,
    429: ErrorCode.rate_limited,
    503: ErrorCode.unavailable,
    504: ErrorCode.deadline_exceeded,
}


def _validation_message(e: RequestValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg", "invalid")))
    return "invalid request: " + "; ".join(parts)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """Every method some route takes at this path: Starlette's own 405 names only the first route's."""
    routes = request.app.routes
    return ", ".join(
        m for m in _METHODS if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)
    )


def install(app: FastAPI) -> None:
    async def on_error(request: Request, e: Exception) -> JSONResponse:
        # ApiError is a BusError: what the gateway refuses and what a stage refused answer alike.
        assert isinstance(e, BusError)
        return error_response(e, request.url.path)

    async def on_http(request: Request, e: Exception) -> JSONResponse:
        assert isinstance(e, StarletteHTTPException)
        code = _BY_STATUS.get(e.status_code, ErrorCode.bad_request if e.status_code < 500 else ErrorCode.internal)
        message = "no such route" if e.status_code == 404 else str(e.detail)
        headers = dict(e.headers or {})
        if e.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return error_response(ApiError(code, message, status=e.status_code), request.url.path, headers)

    async def on_validation(request: Request, e: Exception) -> JSONResponse:
        # FastAPI answers 422; the contract says bad input is 400 in the one shape.
        assert isinstance(e, RequestValidationError)
        return error_response(ApiError(ErrorCode.bad_request, _validation_message(e)), request.url.path)

    app.add_exception_handler(BusError, on_error)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
