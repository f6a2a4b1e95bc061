"""The operator console in headless Chromium: requests list, one request with its waterfall, dashboard,
and a replay side by side with its original. Screenshots go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record, chat
from tests.e2e.warm import warm

sync_api = pytest.importorskip("playwright.sync_api")
Page = sync_api.Page


EIGHT = {"gateway", "context", "safety_in", "router", "tools", "inference", "safety_out", "logger"}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def page(stack: Stack) -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def _goto(page: Page, url: str, ready: str) -> None:
    page.goto(url)
    if "key=" in url and page.is_visible("#url-key"):
        page.click("#url-key-accept")  # a link's key is only offered: the operator accepts it
    page.wait_for_function(
        "ready => document.body.dataset.ready === ready || document.body.dataset.ready === 'error'", arg=ready
    )
    err = page.locator("#error")
    assert err.count() == 0, err.inner_text()


def test_console_pages(page: Page, client: httpx.Client, stack: Stack) -> None:
    warm(client)
    evs, resp = chat(client, f"con-{uuid.uuid4().hex[:8]}", "What is the status of my order A1001?", max_tokens=24)
    assert evs[-1].event == "done"
    rid = resp.headers["x-request-id"]
    admin_record(stack, rid, lambda r: EIGHT <= {s["service"] for s in r["spans"]} and "raw_output" in r["record"])
    base = f"{stack.url}/console"
    p = page

    # The key comes from ?key= once (accepted), then from localStorage.
    _goto(p, f"{base}?key={stack.admin_key}#/requests", "/requests")
    assert "key=" not in p.url
    row = p.locator(f"tr.req-row[data-rid='{rid}']")
    assert row.count() == 1
    p.screenshot(path=str(ARTIFACTS / "console-requests.png"), full_page=True)

    # Filters narrow the list (the form writes them into the URL).
    p.select_option("#filters select[name=status]", "error")
    p.click("#filters button[type=submit]")
    p.wait_for_function("() => location.hash.includes('status=error') && document.body.dataset.ready")
    # `ready` still holds the list's route from before the filter: wait for the filtered list itself
    # (a filter that kept the row fails here, after the page's timeout).
    p.wait_for_function("rid => !document.querySelector(`tr.req-row[data-rid='${rid}']`)", arg=rid)
    assert p.locator(f"tr.req-row[data-rid='{rid}']").count() == 0

    # One request: prompt, stages, tools, output and a waterfall with bars from all eight services.
    _goto(p, f"{base}#/r/{rid}", f"/r/{rid}")
    bars = p.locator("#waterfall rect.wf-bar")
    services = {bars.nth(i).get_attribute("data-service") for i in range(bars.count())}
    assert EIGHT <= services, services
    assert "A1001" in p.inner_text("#prompt")
    assert "orders" in p.inner_text("#tools")
    stages = {
        p.locator("#stages tr[data-stage]").nth(i).get_attribute("data-stage")
        for i in range(p.locator("#stages tr[data-stage]").count())
    }
    assert stages >= EIGHT - {"logger"}
    assert p.inner_text("#output").strip()
    assert p.locator("#waterfall circle.wf-event").count() >= 1, "the TTFT span event is drawn"
    p.screenshot(path=str(ARTIFACTS / "console-request.png"), full_page=True)

    # Replay from the console, then the two side by side.
    p.click("#replay-inference")
    p.wait_for_selector("#replay-result a", timeout=90_000)
    assert "matched token for token" in p.inner_text("#replay-result")
    p.screenshot(path=str(ARTIFACTS / "console-replay.png"), full_page=True)
    p.click("#replay-result a:text('side by side')")
    p.wait_for_selector("#compare-verdict")
    assert "match token for token" in p.inner_text("#compare-verdict")
    assert p.locator("#compare [data-side]").count() == 2
    p.screenshot(path=str(ARTIFACTS / "console-compare.png"), full_page=True)

    # Dashboard: five charts drawn, totals counted.
    _goto(p, f"{base}#/dashboard?window=1h", "/dashboard")
    svgs = p.locator("svg.chart")
    charts = {svgs.nth(i).get_attribute("data-chart") for i in range(svgs.count())}
    assert charts == {"rpm", "ttft", "tpot", "cache", "errors"}
    assert p.locator("svg.chart[data-chart=rpm] rect").count() >= 1
    assert p.locator("svg.chart[data-chart=ttft] polyline").count() >= 1
    p.screenshot(path=str(ARTIFACTS / "console-dashboard.png"), full_page=True)
