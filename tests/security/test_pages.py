"""The pages cannot be hijacked. A `?key=` link once replaced the saved key in silence, so a victim who
followed an attacker's link chatted into the attacker's account (where the attacker read it all); the
console had no content security policy and could be framed. Now a link's key is only offered (its prefix
shown) and leaves the address bar either way, every response carries the policy, and another origin
cannot frame a page.

Driven in a real Chromium against a real gateway with the real context and logger services behind it
(in this process, over a real nats-server): the pages need nothing of the model, so these tests do not
wait for the whole stack."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.services.context.service import setup as context_setup
from switchyard.services.context.settings import ContextSettings
from switchyard.services.logger.service import setup as logger_setup
from switchyard.services.logger.settings import LoggerSettings
from tests.http_server import serve_http
from tests.services.gateway.harness import connect, gateway
from tests.wait import wait_for

async_api = pytest.importorskip("playwright.async_api")

CHROMIUM = "/usr/bin/chromium"
HAVE_CHROMIUM = Path(CHROMIUM).exists()
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CHAT_KEY = "switchyard.apiKey"
ADMIN_KEY = "switchyard.adminKey"
# Every policy violation the page meets, recorded before any of its own scripts run.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
"""


@dataclass
class Site:
    url: str
    api_key: str
    admin_key: str
    other_key: str  # another tenant's: the attacker's


@pytest.fixture(scope="module")
async def site(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    data: Path = tmp_path_factory.mktemp("pages")
    lbus, cbus = await connect(nats_server, "logger"), await connect(nats_server, "context")
    logger_cleanup = await logger_setup(
        lbus, LoggerSettings(data_dir=str(data), durable=f"logger-{uuid.uuid4().hex[:8]}", fetch_timeout_s=0.2)
    )
    context_cleanup = await context_setup(cbus, ContextSettings(data_dir=str(data)))
    async with gateway(nats_server, data) as g:
        _, api_key = await g.keys.create("acme", "pro", user="ann")
        _, admin_key = await g.keys.create("ops", "pro", user="root", admin=True)
        _, other_key = await g.keys.create("mallory-inc", "pro", user="mallory")
        yield Site(g.url, api_key, admin_key, other_key)
    for bus, cleanup in ((cbus, context_cleanup), (lbus, logger_cleanup)):
        await bus.quiesce()
        await cleanup()
        await bus.close()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    if not HAVE_CHROMIUM:
        pytest.skip(f"no browser at {CHROMIUM}")
    async with async_api.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        await b.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    """A fresh profile (nothing saved) whose console errors and policy violations are kept in `page.problems`."""
    context = await browser.new_context()
    await context.add_init_script(RECORD_VIOLATIONS)
    pg = await context.new_page()
    pg.set_default_timeout(30_000)
    pg.problems = []
    pg.on("pageerror", lambda e: pg.problems.append(f"pageerror: {e}"))
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console: {m.text}"))
    yield pg
    await context.close()


async def saved(pg: Any, name: str) -> str | None:
    value: str | None = await pg.evaluate("name => localStorage.getItem(name)", name)
    return value


async def violations(pg: Any) -> list[str]:
    got: list[str] = await pg.evaluate("window.__violations")
    return got


async def save_chat_key(pg: Any, site: Site, key: str) -> None:
    await pg.goto(f"{site.url}/")
    await pg.fill("#api-key", key)
    await pg.click("#key-form button[type=submit]")
    assert await saved(pg, CHAT_KEY) == key


async def save_admin_key(pg: Any, site: Site, view: str) -> None:
    await pg.goto(f"{site.url}/console#{view}")
    await pg.fill("#adminkey", site.admin_key)
    await pg.click("#keyform button[type=submit]")
    await console_ready(pg, view)


async def console_ready(pg: Any, view: str) -> None:
    await pg.wait_for_function(
        "v => document.body.dataset.ready === v || document.body.dataset.ready === 'error'", arg=view
    )
    assert await pg.locator("#error").count() == 0, await pg.inner_text("#error")


async def test_every_response_carries_the_policy(site: Site) -> None:
    """Pages, their scripts, JSON, errors and a route that does not exist: the same headers on each."""
    async with httpx.AsyncClient(base_url=site.url, headers={"Authorization": f"Bearer {site.api_key}"}) as c:
        responses = [
            await c.get(path)
            for path in ("/", "/console", "/docs", "/static/chat.js", "/console/console.js", "/v1/models", "/nope")
        ]
        responses.append(await c.get("/v1/models", headers={"Authorization": ""}))  # no key: 401
        bad = await c.post("/v1/feedback", content=b"{", headers={"content-type": "application/json"})
        responses.append(bad)  # bad JSON: 400
    for r in responses:
        csp = r.headers.get("content-security-policy", "")
        where = f"{r.request.url.path} ({r.status_code})"
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp, where
        assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp, where
        assert r.headers.get("x-content-type-options") == "nosniff", where
        assert r.headers.get("referrer-policy") == "no-referrer", where
    assert {r.status_code for r in responses} >= {200, 400, 401, 404}


async def test_a_chat_link_key_is_only_offered(page: Any, site: Site) -> None:
    pg = page
    mine, theirs = site.api_key, site.other_key
    await save_chat_key(pg, site, mine)

    # The attacker's link: the key leaves the address bar at once; the page asks, naming the key's prefix.
    await pg.goto(f"{site.url}/?key={theirs}")
    assert "key=" not in pg.url and theirs not in pg.url
    await pg.wait_for_selector("#url-key:not([hidden])")
    text = await pg.inner_text("#url-key-text")
    assert theirs[:10] in text and theirs not in text  # the prefix, never the whole secret
    assert await saved(pg, CHAT_KEY) == mine  # nothing replaced while the user has not answered
    assert await pg.input_value("#api-key") == mine
    # Declined: the saved key stays, and a reload does not ask again (the link's key is gone).
    await pg.click("#url-key-decline")
    assert await pg.is_hidden("#url-key")
    assert await saved(pg, CHAT_KEY) == mine
    await pg.reload()
    await pg.wait_for_selector("#input")
    assert await pg.is_hidden("#url-key") and await saved(pg, CHAT_KEY) == mine
    # Going back does not bring the key back either: the history entry was rewritten.
    await pg.go_back()
    assert theirs not in pg.url

    # Accepted, the link's key is the one used.
    await pg.goto(f"{site.url}/?key={theirs}")
    await pg.click("#url-key-accept")
    assert await saved(pg, CHAT_KEY) == theirs and await pg.input_value("#api-key") == theirs
    assert await pg.is_hidden("#url-key")

    # The link of the key already in use asks nothing.
    await pg.goto(f"{site.url}/?key={theirs}")
    await pg.wait_for_selector("#input")
    assert await pg.is_hidden("#url-key") and "key=" not in pg.url
    assert not await violations(pg), await violations(pg)


async def test_a_link_key_is_not_saved_unasked_in_a_fresh_browser(page: Any, site: Site) -> None:
    pg = page
    await pg.goto(f"{site.url}/?key={site.api_key}&x=1")
    await pg.wait_for_selector("#url-key:not([hidden])")
    assert "key=" not in pg.url and pg.url.endswith("?x=1")
    assert await saved(pg, CHAT_KEY) is None
    await pg.click("#url-key-accept")
    assert await saved(pg, CHAT_KEY) == site.api_key
    # With the key in use, the page loads what the key may see: the model menu fills.
    await pg.wait_for_function("() => document.querySelectorAll('#model option').length > 0")
    assert not await violations(pg), await violations(pg)


async def test_a_console_link_key_is_only_offered(page: Any, site: Site) -> None:
    pg = page
    await save_admin_key(pg, site, "/keys")
    await pg.goto(f"{site.url}/console?key={site.other_key}#/keys")
    assert "key=" not in pg.url and pg.url.endswith("#/keys")
    await pg.wait_for_selector("#url-key:not([hidden])")
    assert site.other_key[:10] in await pg.inner_text("#url-key-text")
    assert await saved(pg, ADMIN_KEY) == site.admin_key
    await pg.click("#url-key-decline")
    assert await pg.is_hidden("#url-key") and await saved(pg, ADMIN_KEY) == site.admin_key
    # The console still works with the operator's own key.
    await console_ready(pg, "/keys")

    # In a fresh profile too, nothing is saved before the operator accepts.
    await pg.evaluate("localStorage.clear()")
    await pg.goto(f"{site.url}/console?key={site.admin_key}#/keys")
    await pg.wait_for_selector("#url-key:not([hidden])")
    assert await saved(pg, ADMIN_KEY) is None
    await pg.click("#url-key-accept")
    assert await saved(pg, ADMIN_KEY) == site.admin_key
    await console_ready(pg, "/keys")


async def test_the_pages_run_under_their_policy(page: Any, site: Site) -> None:
    """The chat page, the API docs and every view of the console: no violation, no error."""
    pg = page
    await save_chat_key(pg, site, site.api_key)
    await pg.wait_for_function("() => document.querySelectorAll('#model option').length > 0")
    await pg.wait_for_selector("#conversations .muted")  # the (empty) list came back
    await pg.goto(f"{site.url}/docs")
    await pg.wait_for_function("() => !document.querySelector('#ops').innerText.startsWith('Loading')")
    assert not await violations(pg), await violations(pg)

    await save_admin_key(pg, site, "/requests")
    for view in ("/requests", "/dashboard", "/keys", "/models"):
        await pg.goto(f"{site.url}/console#{view}")
        await console_ready(pg, view)
        assert not await violations(pg), (view, await violations(pg))
    assert not pg.problems, pg.problems


class FramingPage(BaseHTTPRequestHandler):
    """Another origin's page that frames the gateway's pages (the target comes in the query)."""

    def do_GET(self) -> None:
        target = self.path.split("?target=", 1)[1]
        body = f'<!doctype html><iframe id="f" src="{target}" width="800" height="600"></iframe>'.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("path", ["/", "/console", "/docs"])
async def test_another_origin_cannot_frame_a_page(page: Any, site: Site, path: str) -> None:
    pg = page
    refused: list[str] = []
    pg.on("console", lambda m: "frame-ancestors" in m.text and refused.append(m.text))
    with serve_http(FramingPage) as other:
        assert other.rsplit(":", 1)[1] != site.url.rsplit(":", 1)[1]  # another port: another origin
        await pg.goto(f"{other}/?target={site.url}{path}")
        await pg.wait_for_function("() => window.frames.length === 1 && document.readyState === 'complete'")
        # Chromium says why it refused (its console event may come a moment after the load).
        await wait_for(lambda: refused, 10, "the frame-ancestors refusal")
        framed = pg.frames[1]
        # The frame holds the browser's error page, none of ours.
        assert await framed.query_selector("#input, #keyform, #ops") is None
        assert not (await framed.evaluate("() => document.title")).startswith("Switchyard")
