"""The OpenAPI document is served, names every operation's body, success and error statuses, and the
docs page that reads it is served under the pages' content security policy."""

from __future__ import annotations

import httpx

from switchyard.services.gateway.openapi import BODIES, ERRORS, PUBLIC, SUCCESS
from tests.services.gateway.harness import Gateway


async def test_openapi_document_is_true_to_the_routes(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    doc = r.json()
    ops = {(m, p): op for p, methods in doc["paths"].items() for m, op in methods.items()}
    assert set(BODIES) <= set(ops) and set(SUCCESS) <= set(ops) and PUBLIC <= set(ops)
    for key, model in BODIES.items():
        ref = ops[key]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.rsplit("/", 1)[-1] == model.__name__ and model.__name__ in doc["components"]["schemas"]
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
