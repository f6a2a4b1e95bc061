"""The OpenAPI document at `/openapi.json`: FastAPI's, from what each route declares, with the one error shape.

Each route declares its success itself (status_code, response_model, `responses=` from route_docs.py) and its
request body through the `json_body` dependency that reads it (body.py's `JsonBody` carries the model; FastAPI
cannot see a body read by a dependency, so it is named here from the route's own dependency). What is added
here is the error statuses each operation can answer, in their one shape, and the two ways to present a key.
FastAPI's 422 never happens (bad input is 400), so it is removed."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from switchyard.services.gateway.body import JsonBody

JSON = "application/json"
PUBLIC = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}

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


def error_schema(anthropic: bool) -> dict[str, Any]:
    """The one error shape (`/v1/messages` wraps it as Anthropic does)."""
    ref = {"$ref": "#/components/schemas/ErrorInfo"}
    if anthropic:
        return {
            "type": "object",
            "required": ["type", "error"],
            "properties": {"type": {"const": "error"}, "error": ref},
        }
    return {"type": "object", "required": ["error"], "properties": {"error": ref}}


def _json_body(dependant: Dependant) -> JsonBody | None:
    for dep in dependant.dependencies:
        if isinstance(dep.call, JsonBody):
            return dep.call
        found = _json_body(dep)
        if found is not None:
            return found
    return None


def json_bodies(app: FastAPI) -> dict[tuple[str, str], JsonBody]:
    """(method, path) → the body its handler reads, for every route that reads one through `json_body`."""
    out: dict[tuple[str, str], JsonBody] = {}
    # An included router is one entry of `app.routes`; its routes, with their full paths, are behind it.
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute) and route.include_in_schema:
            body = _json_body(route.dependant)
            if body is not None:
                out |= {(m.lower(), str(context.path_format)): body for m in context.methods or ()}
    return out


def _body_schemas(models: set[type[BaseModel]]) -> dict[str, Any]:
    ordered = sorted(models, key=lambda m: m.__name__)
    refs, top = models_json_schema(
        [(m, "validation") for m in ordered], ref_template="#/components/schemas/{model}", by_alias=True
    )
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    for (model, _), ref in refs.items():
        schemas.setdefault(model.__name__, schemas.get(ref["$ref"].rsplit("/", 1)[-1], {}))
    return schemas


def build(app: FastAPI) -> dict[str, Any]:
    doc = get_openapi(title=app.title, version="1", description=app.description, routes=app.routes)
    bodies = json_bodies(app)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.update(_body_schemas({b.model for b in bodies.values()}))
    schemas["ErrorInfo"] = {
        "type": "object",
        "required": ["type", "code", "message"],
        "properties": {"type": {"type": "string"}, "code": {"type": "string"}, "message": {"type": "string"}},
    }
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer"},
        "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    }
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            body = bodies.get((method, path))
            if body is not None:
                op["requestBody"] = {
                    "required": not body.optional,
                    "content": {JSON: {"schema": {"$ref": f"#/components/schemas/{body.model.__name__}"}}},
                }
            _errors(method, path, op)
    return doc


def _errors(method: str, path: str, op: dict[str, Any]) -> None:
    responses = {code: r for code, r in op.get("responses", {}).items() if code != "422"}
    error = {JSON: {"schema": error_schema(path.startswith("/v1/messages"))}}
    if (method, path) in PUBLIC:
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
