"""The FastAPI application: routes, the request-id middleware and the one error shape."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import structlog
from fastapi import APIRouter, Depends, FastAPI
from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from switchyard.libs.bus import Bus
from switchyard.libs.store.keys import KeyStore
from switchyard.schemas import ErrorCode, ErrorInfo, Sampling
from switchyard.services.gateway import errors, openapi, web
from switchyard.services.gateway.admin import keys as keys_api
from switchyard.services.gateway.admin import mcp as mcp_api
from switchyard.services.gateway.admin import models as models_api
from switchyard.services.gateway.admin import ops as ops_api
from switchyard.services.gateway.admin import requests as admin_api
from switchyard.services.gateway.auth import require_admin
from switchyard.services.gateway.body import MAX_JSON_DEPTH, BodyLimit
from switchyard.services.gateway.chat_completions import api as openai_api
from switchyard.services.gateway.completions import api as completions_api
from switchyard.services.gateway.core import MAX_SEED, Gateway
from switchyard.services.gateway.embeddings import api as embeddings_api
from switchyard.services.gateway.messages import api as anthropic_api
from switchyard.services.gateway.metrics import Metrics
from switchyard.services.gateway.product import feedback as feedback_api
from switchyard.services.gateway.product import files_api
from switchyard.services.gateway.product import knowledge as knowledge_api
from switchyard.services.gateway.product.router import router as product_router
from switchyard.services.gateway.responses import api as responses_api
from switchyard.services.gateway.security_headers import SecurityHeaders
from switchyard.services.gateway.settings import GatewaySettings
from switchyard.services.gateway.simple_chat import api as chat_api
from switchyard.services.gateway.tokens import api as tokens_api
from switchyard.services.gateway.write_limit import limit_writes

log = structlog.get_logger()


class RequestIdMiddleware:
    """Gives every request its rid, returns it as `x-request-id` on every response (errors included),
    counts responses by route and status, and turns a crash into the error shape rather than a bare 500."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex
        scope.setdefault("state", {})["rid"] = rid
        status = 500
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                MutableHeaders(scope=message)["x-request-id"] = rid
            await send(message)

        structlog.contextvars.bind_contextvars(rid=rid)
        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error", path=scope.get("path"))
            if not started:
                info = ErrorInfo.of(ErrorCode.internal, "internal error")
                anthropic = str(scope.get("path", "")).startswith("/v1/messages")
                body = json.dumps(errors.error_body(info, anthropic=anthropic)).encode()
                await send_with_id(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
        finally:
            structlog.contextvars.unbind_contextvars("rid")
            route = scope.get("route")
            self.metrics.requests.labels(getattr(route, "path", "unmatched"), str(status)).inc()


def body_limits(settings: GatewaySettings) -> Callable[[str], int]:
    """Each route's body limit; read per request, so a test may lower a module's."""

    def limit_for(path: str) -> int:
        if path == "/v1/files":
            return files_api.MAX_UPLOAD_BYTES
        if path.startswith("/v1/feedback"):
            return feedback_api.MAX_BODY_BYTES
        return settings.max_body_bytes

    return limit_for


def describe(settings: GatewaySettings) -> str:
    """The API document's description: the error shape, how to send a key, and the input limits as these
    settings and the wire models set them."""
    max_tokens = Sampling.model_json_schema()["properties"]["max_tokens"]
    return f"""Switchyard's HTTP API. Every error has one shape, `{{"error": {{"type", "code", "message"}}}}`
(on `/v1/messages` with Anthropic's top-level `"type": "error"`). Keys go in `Authorization: Bearer` or `x-api-key`.

Limits: JSON bodies up to {settings.max_body_bytes} bytes and {MAX_JSON_DEPTH} levels deep; a message's text up to
{settings.max_text_chars} characters, a request's messages up to {settings.max_messages} and {settings.max_input_chars}
characters in all; uploads up to {files_api.MAX_UPLOAD_BYTES} bytes of multipart body and
{files_api.MAX_FILE_TEXT_BYTES} bytes of text (one bus message carries it); `seed` from 0 to {MAX_SEED};
`max_tokens` from {max_tokens["minimum"]} to {max_tokens["maximum"]}."""


def create_app(
    settings: GatewaySettings,
    bus: Bus | None = None,
    keys: KeyStore | None = None,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> FastAPI:
    """On a bus and key store the caller owns (tests), or with a lifespan that opens them (lifespan.py)."""
    metrics = Metrics()
    # FastAPI's own docs pages load Swagger UI / ReDoc from a CDN; openapi.install serves our own page.
    app = FastAPI(
        title="Switchyard gateway",
        description=describe(settings),
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    if bus is not None and keys is not None:
        app.state.gateway = Gateway(settings=settings, bus=bus, keys=keys, metrics=metrics)
    elif lifespan is None:
        raise ValueError("create_app needs a bus and a key store, or a lifespan that opens them")
    errors.install(app)
    # Writes through these routers are rate limited like the chat routes (write_limit.py).
    writes = [Depends(limit_writes)]
    app.include_router(product_router, dependencies=writes)  # first: /v1/conversations/search is not a conversation id
    app.include_router(chat_api.router)
    app.include_router(openai_api.router)
    app.include_router(completions_api.router)
    app.include_router(anthropic_api.router)
    app.include_router(responses_api.router)
    app.include_router(ops_api.router)
    app.include_router(feedback_api.router, dependencies=writes)
    app.include_router(embeddings_api.router)
    app.include_router(tokens_api.router)
    # Every admin route, wherever it is written, behind one guard.
    admin = APIRouter(dependencies=[Depends(require_admin), *writes])
    # admin_api first: its /v1/admin/keys/standing is not a key id.
    for router in (
        admin_api.router,
        ops_api.admin_router,
        knowledge_api.admin_router,
        keys_api.admin_router,
        models_api.admin_router,
        mcp_api.admin_router,
    ):
        admin.include_router(router)
    app.include_router(admin)
    openapi.install(app)
    web.install(app)
    app.add_middleware(BodyLimit, limit_for=body_limits(settings))
    app.add_middleware(RequestIdMiddleware, metrics=metrics)
    if settings.cors_origins:
        # Outside the rest: a preflight is answered before any key is asked for, and every answer (errors too)
        # carries the headers. Keys travel in a header, never a cookie: no credentials mode.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["*"],
            expose_headers=["x-request-id", "retry-after"],
            max_age=settings.cors_max_age_s,
        )
    # Outermost: its headers reach every response, the crash handler's included.
    app.add_middleware(SecurityHeaders)
    return app
