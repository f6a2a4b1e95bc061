"""The OpenAPI document is served, holds every route of the app but the pages, names every operation's body,
success and error statuses, and the docs page that reads it is served under the pages' content security policy."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel
from starlette.routing import Mount

from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.openapi import ERRORS, PUBLIC, build, json_bodies
from tests.services.gateway.harness import Gateway

JSON, SSE, JSONL = "application/json", "text/event-stream", "application/x-ndjson"
# (status, media types) of success where it is not 200 with JSON: each route declares it (status_code,
# responses=); the document must say it.
SUCCESS: dict[tuple[str, str], tuple[str, set[str]]] = {
    ("post", "/chat"): ("200", {SSE}),
    ("get", "/v1/streams/{rid}"): ("200", {SSE}),
    ("post", "/v1/streams/{rid}/cancel"): ("202", {JSON}),
    ("post", "/v1/chat/completions"): ("200", {JSON, SSE}),
    ("post", "/v1/completions"): ("200", {JSON, SSE}),
    ("post", "/v1/messages"): ("200", {JSON, SSE}),
    ("post", "/v1/responses"): ("200", {JSON, SSE}),
    ("post", "/v1/conversations"): ("201", {JSON}),
    ("post", "/v1/files"): ("201", {JSON}),
    ("post", "/v1/memory"): ("201", {JSON}),
    ("post", "/v1/admin/keys"): ("201", {JSON}),
    ("post", "/v1/admin/models"): ("201", {JSON}),
    ("post", "/v1/admin/mcp-servers"): ("201", {JSON}),
    ("post", "/v1/feedback"): ("202", {JSON}),
    ("post", "/v1/feedback/preference"): ("202", {JSON}),
    ("get", "/metrics"): ("200", {"text/plain"}),
    ("get", "/v1/admin/export/requests"): ("200", {JSONL}),
    ("get", "/v1/admin/export/preferences"): ("200", {JSONL}),
}


async def test_openapi_document_is_true_to_the_routes(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    doc = r.json()
    ops = {(m, p): op for p, methods in doc["paths"].items() for m, op in methods.items()}
    bodies = json_bodies(gw.app)
    # Every JSON body a handler reads, each named by the route's own `json_body` dependency.
    assert {k for k, op in ops.items() if JSON in op.get("requestBody", {}).get("content", {})} == set(bodies)
    assert len(bodies) == 22 and set(SUCCESS) <= set(ops) and PUBLIC <= set(ops)
    for key, body in bodies.items():
        ref = ops[key]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        name = body.model.__name__
        assert ref.rsplit("/", 1)[-1] == name and name in doc["components"]["schemas"]
        assert ops[key]["requestBody"]["required"] is not body.optional
    assert bodies[("post", "/v1/conversations")].optional and not bodies[("post", "/chat")].optional
    upload = ops[("post", "/v1/files")]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert upload["required"] == ["file"]
    assert set(ops[("post", "/chat")]["responses"]["200"]["content"]) == {"text/event-stream"}
    assert set(ops[("post", "/v1/chat/completions")]["responses"]["200"]["content"]) == {
        "application/json",
        "text/event-stream",
    }
    assert set(ops[("get", "/v1/admin/export/requests")]["responses"]["200"]["content"]) == {"application/x-ndjson"}
    for key, op in ops.items():
        assert "422" not in op["responses"], key  # bad input is 400 here
        if key not in PUBLIC:
            assert set(ERRORS) <= set(op["responses"]) and op["security"], key
    for key, op in ops.items():
        status, media = SUCCESS.get(key, ("200", {JSON}))
        assert [c for c in op["responses"] if c.startswith("2")] == [status], key
        assert set(op["responses"][status].get("content", {})) == media, key
    # A JSON body a pydantic model describes is in the document, not `{}`: the protocols' answers included.
    card = ops[("post", "/v1/admin/models")]["responses"]["201"]["content"]["application/json"]["schema"]
    assert "$ref" in card, card
    for key, model in {
        ("post", "/v1/chat/completions"): "ChatCompletion",
        ("post", "/v1/completions"): "Completion",
        ("post", "/v1/messages"): "Message",
    }.items():
        answer = ops[key]["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{model}"}, (key, answer)
        assert doc["components"]["schemas"][model]["properties"], model
    # Times in query strings are written as strings (ISO 8601 or epoch ms), and the document says so.
    since = next(p for p in ops[("get", "/v1/admin/requests")]["parameters"] if p["name"] == "since")
    assert since["schema"]["type"] == "string"
    # The limits the description names are the settings'.
    assert f"JSON bodies up to {gw.settings.max_body_bytes} bytes" in doc["info"]["description"]
    anthropic_error = ops[("post", "/v1/messages")]["responses"]["500"]["content"]["application/json"]["schema"]
    assert anthropic_error["required"] == ["type", "error"]


async def test_docs_page_is_served_without_a_cdn(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        page = await c.get("/docs")
        script = await c.get("/static/docs.js")
    assert page.status_code == 200 and "/static/docs.js" in page.text and "/openapi.json" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace('href="/openapi.json"', "")
    assert script.status_code == 200 and "openapi.json" in script.text


# Routes that are not the API, each for a reason: the pages (HTML for a browser, not operations) and the
# document itself.
NOT_API = {
    ("get", "/"),
    ("get", "/console"),
    ("get", "/docs"),
    ("get", "/openapi.json"),
    ("head", "/openapi.json"),
}
NOT_API_MOUNTS = {"/static", "/console"}  # the pages' files


def app_routes(app: FastAPI) -> tuple[set[tuple[str, str]], set[str]]:
    """Every (method, path) the app answers, in the document's spelling, and the paths of its mounts."""
    routes: set[tuple[str, str]] = set()
    mounts: set[str] = set()
    # `app.routes` holds an included router as one entry; its routes are behind it, with their full paths.
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, Mount):
            mounts.add(str(route.path))
        else:  # an APIRoute, or one of Starlette's own
            routes |= {(m.lower(), str(route.path_format)) for m in route.methods or ()}
    return routes, mounts


def undocumented(app: FastAPI, doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The API routes of `app` (all but `NOT_API`) that `doc` has no operation for."""
    routes, _ = app_routes(app)
    ops = {(m, p) for p, methods in doc["paths"].items() for m in methods}
    return sorted(k for k in routes - NOT_API if k not in ops)


async def test_every_route_is_in_the_document_with_its_responses(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        doc = (await c.get("/openapi.json")).json()
    ops = {(m, p): op for p, methods in doc["paths"].items() for m, op in methods.items()}
    routes, mounts = app_routes(gw.app)
    assert mounts == NOT_API_MOUNTS
    assert set(json_bodies(gw.app)) <= routes and set(SUCCESS) <= routes  # those of included routers too
    # A route added without its place in the document fails here, not in a client's generated SDK.
    missing = undocumented(gw.app, doc)
    assert not missing, f"routes missing from /openapi.json: {missing}"
    for key in sorted(routes - NOT_API):
        statuses = set(ops[key]["responses"])
        assert any(s.startswith("2") for s in statuses), (key, statuses)
        if key not in PUBLIC:
            assert set(ERRORS) <= statuses, (key, statuses)
    # And the document names nothing the app does not answer.
    assert set(ops) <= routes, sorted(set(ops) - routes)


def test_a_route_left_out_of_the_document_is_caught() -> None:
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.get("/v1/shown")
    async def shown() -> dict[str, str]:
        return {}

    @app.get("/v1/hidden", include_in_schema=False)
    async def hidden() -> dict[str, str]:
        return {}

    assert undocumented(app, app.openapi()) == [("get", "/v1/hidden")]


class Note(BaseModel):
    text: str


def test_a_body_is_documented_from_the_dependency_that_reads_it() -> None:
    app = FastAPI(docs_url=None, redoc_url=None)

    @app.post("/v1/notes")
    async def note(body: Annotated[Note, json_body(Note)]) -> dict[str, str]:
        return {}

    @app.post("/v1/plain")
    async def plain() -> dict[str, str]:
        return {}

    doc = build(app)
    assert doc["paths"]["/v1/notes"]["post"]["requestBody"]["content"][JSON]["schema"]["$ref"].endswith("/Note")
    assert "requestBody" not in doc["paths"]["/v1/plain"]["post"]
    assert doc["components"]["schemas"]["Note"]["required"] == ["text"]
