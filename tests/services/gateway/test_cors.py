"""Browsers on other origins: a real Chromium page served from another origin calls the API when the operator
allowed that origin (preflight answered, the answer and its `x-request-id` readable), and is refused by the
browser itself when no origin is configured (the default) or another one is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from switchyard.libs.bus import NatsServer
from tests.services.gateway.harness import Gateway, Responder, gateway, serve

playwright = pytest.importorskip("playwright.async_api")

CHROMIUM = Path("/usr/bin/chromium")
HAS_CHROMIUM = CHROMIUM.exists()
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
MODEL = "SmolLM2-135M-Instruct"
# The page's script: one Responses call with a key (a header, so the browser sends a preflight first).
CALL = """async ([api, key, model]) => {
  try {
    const r = await fetch(api + "/v1/responses", {
      method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify({model: model, input: "hello", store: false}),
    });
    const body = await r.json();
    return {ok: true, status: r.status, rid: r.headers.get("x-request-id"), text: body.output.at(-1).content[0].text};
  } catch (e) {
    return {ok: false, error: String(e)};
  }
}"""


@pytest.fixture(scope="module")
async def page_origin() -> AsyncIterator[str]:
    """A second web server: the other origin the page comes from."""
    site = FastAPI()

    @site.get("/")
    async def index() -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>another app</title><p>another origin</p>")

    async with serve(site) as url:
        yield url


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    if not HAS_CHROMIUM:
        pytest.skip(f"no browser at {CHROMIUM}")
    async with playwright.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        await b.close()


async def _call_from_page(browser: Any, page_origin: str, api: Gateway) -> dict[str, Any]:
    page = await browser.new_page()
    try:
        await page.goto(page_origin + "/")
        result: dict[str, Any] = await page.evaluate(CALL, [api.url, api.pro_key, MODEL])
        return result
    finally:
        await page.close()


@pytest.fixture
async def allowed_gw(
    nats_server: NatsServer, responder: Responder, tmp_path: Path, page_origin: str
) -> AsyncIterator[Gateway]:
    async with gateway(nats_server, tmp_path, cors_origins=[page_origin]) as g:
        _, g.pro_key = await g.keys.create("acme", "pro", user="ann")
        yield g


async def test_an_allowed_origin_calls_the_api_from_a_browser(
    browser: Any, page_origin: str, allowed_gw: Gateway
) -> None:
    got = await _call_from_page(browser, page_origin, allowed_gw)
    assert got["ok"], got
    assert got["status"] == 200 and got["text"] == "Hello"
    assert len(got["rid"]) == 32  # the request id is exposed to the page

    async with httpx.AsyncClient(base_url=allowed_gw.url) as c:
        preflight = await c.options(
            "/v1/responses",
            headers={
                "Origin": page_origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == page_origin
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in preflight.headers  # keys are headers, not cookies
        other = await c.options(
            "/v1/responses", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        # An error answer carries the headers too, so the page can read why it was refused.
        refused = await c.post("/v1/responses", json={"model": MODEL, "input": "hi"}, headers={"Origin": page_origin})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == page_origin


async def test_another_origin_is_refused_by_default(browser: Any, page_origin: str, gw: Gateway) -> None:
    assert gw.settings.cors_origins == []
    got = await _call_from_page(browser, page_origin, gw)
    assert not got["ok"] and "Failed to fetch" in got["error"], got
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/v1/models", headers={"Origin": page_origin, **gw.auth()})
    assert r.status_code == 200 and not any(h.startswith("access-control-") for h in r.headers)


async def test_an_origin_not_listed_is_refused(browser: Any, allowed_gw: Gateway) -> None:
    async with serve(FastAPI()) as elsewhere:  # yet another origin, not in the list
        got = await _call_from_page(browser, elsewhere, allowed_gw)
    assert not got["ok"], got
