"""The OpenAPI document at `/openapi.json`, made true to the API.

Each route declares its success itself: status_code, response_model for a JSON body, and `responses=`
(route_docs.py) for server-sent events, JSON lines and Prometheus text. What FastAPI cannot see is
completed here: handlers read their bodies through the `json_body` dependency (so the error shape, 415 and
413 come before validation), so the request body of each operation is named from `BODIES` (the same
pydantic model the handler reads); the error statuses it can answer, in their one shape; the admin query
strings as clients write them (times and durations are strings their models parse); and the two ways to
present a key. FastAPI's 422 never happens (bad input is 400), so it is removed."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from switchyard.libs.store.key_admin import KeyUpdate, NewKey
from switchyard.schemas import McpServerSpec, ModelCard, ReplayRequest
from switchyard.services.gateway.body import MAX_JSON_DEPTH
from switchyard.services.gateway.chat_completions.api import CompletionRequest
from switchyard.services.gateway.completions.api import TextCompletionRequest
from switchyard.services.gateway.embeddings.api import EmbeddingsRequest
from switchyard.services.gateway.messages.api import MessagesRequest
from switchyard.services.gateway.product.conversations import CreateConversation, RenameConversation
from switchyard.services.gateway.product.feedback import PreferenceBody, ThumbsBody
from switchyard.services.gateway.product.files_api import MAX_FILE_TEXT_BYTES, MAX_UPLOAD_BYTES
from switchyard.services.gateway.product.knowledge import NewMemory, SetInstructions, SetSafetyPolicy
from switchyard.services.gateway.responses.request import CompactRequest, ResponsesRequest
from switchyard.services.gateway.simple_chat.api import ChatRequest
from switchyard.services.gateway.tokens.api import CountTokensRequest, DetokenizeRequest, TokenizeRequest

JSON = "application/json"

BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("post", "/chat"): ChatRequest,
    ("post", "/v1/chat/completions"): CompletionRequest,
    ("post", "/v1/completions"): TextCompletionRequest,
    ("post", "/v1/messages"): MessagesRequest,
    ("post", "/v1/responses"): ResponsesRequest,
    ("post", "/v1/responses/compact"): CompactRequest,
    ("post", "/v1/conversations"): CreateConversation,
    ("patch", "/v1/conversations/{chat_id}"): RenameConversation,
    ("post", "/v1/feedback"): ThumbsBody,
    ("post", "/v1/feedback/preference"): PreferenceBody,
    ("post", "/v1/memory"): NewMemory,
    ("put", "/v1/admin/instructions"): SetInstructions,
    ("put", "/v1/admin/safety-policy"): SetSafetyPolicy,
    ("post", "/v1/admin/replay/{rid}"): ReplayRequest,
    ("post", "/v1/embeddings"): EmbeddingsRequest,
    ("post", "/tokenize"): TokenizeRequest,
    ("post", "/detokenize"): DetokenizeRequest,
    ("post", "/v1/messages/count_tokens"): CountTokensRequest,
    ("post", "/v1/admin/keys"): NewKey,
    ("patch", "/v1/admin/keys/{key_id}"): KeyUpdate,
    ("post", "/v1/admin/models"): ModelCard,
    ("post", "/v1/admin/mcp-servers"): McpServerSpec,
}
# Bodies a client may leave out.
OPTIONAL_BODIES = {("post", "/v1/conversations"), ("post", "/v1/admin/replay/{rid}")}

PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}

_STRING = {"type": "string"}
_TIME = {"type": "string", "description": "epoch milliseconds or ISO 8601 (UTC when no zone is named)"}
_FILTERS = {k: _STRING for k in ("tenant", "status", "model", "api", "mode", "safety_action", "replay_of")}
QUERY: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("get", "/v1/admin/requests"): {
        **_FILTERS,
        "replays": {"type": "boolean"},
        "since": _TIME,
        "until": _TIME,
        "cursor": _STRING,
        "limit": {"type": "integer", "minimum": 1, "maximum": 200},
    },
    ("get", "/v1/admin/export/requests"): {**_FILTERS, "since": _TIME, "until": _TIME, "max": {"type": "integer"}},
    ("get", "/v1/admin/export/preferences"): {"tenant": _STRING},
    ("get", "/v1/admin/keys"): {"tenant": {"type": "string", "maxLength": 128}},
    ("get", "/v1/admin/keys/{key_id}/usage"): {"since": _TIME, "until": _TIME},
    ("get", "/v1/admin/stats"): {
        "window": {"type": "string", "pattern": r"^\d+(\.\d+)?[smhdw]?$", "description": "90, 15m, 1h, 7d"},
        "bucket": {"type": "string", "pattern": r"^\d+(\.\d+)?[smhdw]?$"},
        "tenant": _STRING,
        "replays": {"type": "boolean"},
        "until": _TIME,
    },
}

ERRORS = {
    "400": "bad input: malformed or over-deep JSON, a missing or invalid field",
    "401": "missing or invalid API key",
    "403": "the key may not do this (an admin route, a suspended key, a model its key may not use)",
    "404": "no such resource, or another tenant's",
    "405": "method not allowed (the `Allow` header names the allowed ones)",
    "413": "body, text or file over its limit",
    "415": "wrong Content-Type",
    "429": "rate limited, or the key's token budget spent (`Retry-After` says when to retry)",
    "500": "internal error",
    "503": "overloaded or a stage is unavailable (`Retry-After`)",
    "504": "the request's deadline passed",
}

DESCRIPTION = f"""Switchyard's HTTP API. Every error has one shape, `{{"error": {{"type", "code", "message"}}}}`
(on `/v1/messages` with Anthropic's top-level `"type": "error"`). Keys go in `Authorization: Bearer` or `x-api-key`.

Limits: JSON bodies up to 1,000,000 bytes and {MAX_JSON_DEPTH} levels deep; uploads up to {MAX_UPLOAD_BYTES} bytes
of multipart body and {MAX_FILE_TEXT_BYTES} bytes ({MAX_FILE_TEXT_BYTES // 1024} KiB) of text (one bus message
carries it); `seed` from 0 to 2^63-1; `max_tokens` from 1 to 8192."""


def _error_schema(anthropic: bool) -> dict[str, Any]:
    ref = {"$ref": "#/components/schemas/ErrorInfo"}
    if anthropic:
        return {
            "type": "object",
            "required": ["type", "error"],
            "properties": {"type": {"const": "error"}, "error": ref},
        }
    return {"type": "object", "required": ["error"], "properties": {"error": ref}}


def _body_schemas() -> dict[str, Any]:
    models = sorted(set(BODIES.values()), key=lambda m: m.__name__)
    refs, top = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}", by_alias=True
    )
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    for (model, _), ref in refs.items():
        schemas.setdefault(model.__name__, schemas.get(ref["$ref"].rsplit("/", 1)[-1], {}))
    return schemas


def _upload_body() -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "text, markdown or PDF"},
                        "chatId": {"type": "string", "description": "attach to this conversation"},
                    },
                }
            }
        },
    }


def build(app: FastAPI) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version="1", description=DESCRIPTION, routes=app.routes)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(_body_schemas())
    schemas["ErrorInfo"] = {
        "type": "object",
        "required": ["type", "code", "message"],
        "properties": {"type": _STRING, "code": _STRING, "message": _STRING},
    }
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer"},
        "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    }
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            _complete(method, path, op)
    return doc


def _complete(method: str, path: str, op: dict[str, Any]) -> None:
    key = (method, path)
    if key in BODIES:
        name = BODIES[key].__name__
        op["requestBody"] = {
            "required": key not in OPTIONAL_BODIES,
            "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{name}"}}},
        }
    elif key == ("post", "/v1/files"):
        op["requestBody"] = _upload_body()
    params = [p for p in op.get("parameters", []) if p["in"] != "query" or key not in QUERY]
    params += [{"name": n, "in": "query", "required": False, "schema": s} for n, s in QUERY.get(key, {}).items()]
    if params:
        op["parameters"] = params
    # Success is what the route declares (status_code, response_model, responses= from route_docs.py);
    # FastAPI's 422 never happens (bad input is 400), and every error has the one shape.
    responses = {code: r for code, r in op.get("responses", {}).items() if code != "422"}
    error = {JSON: {"schema": _error_schema(path.startswith("/v1/messages"))}}
    if key in PUBLIC:
        responses |= {code: {"description": ERRORS[code], "content": error} for code in ("405", "500")}
    else:
        op["security"] = [{"bearer": []}, {"apiKey": []}]
        responses |= {code: {"description": text, "content": error} for code, text in ERRORS.items()}
    op["responses"] = responses


def install(app: FastAPI) -> None:
    """`/openapi.json` from `build`, made once on first use (web.py serves the page at `/docs` that reads it)."""
    cached: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not cached:
            cached.update(build(app))
        return cached

    app.openapi = openapi  # type: ignore[method-assign]
