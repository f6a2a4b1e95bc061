"""MCP tools on the real stack: an operator registers the SDK's own MCP server over the admin API; its tools
are in `GET /v1/tools`; a chat plans its tool before the model writes, the result streams as a `tool`
event and is in the prompt, the record and the trace; a pipeline replay calls it again; a server that
hangs costs one tool event with status timeout, and the answer still comes. A request that offers the tool
to the model as a function gets the model's own call run on the server: it streams as an `mcp_call` item,
its result goes back to the model, which answers after it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record, chat
from tests.e2e.sse import events as sse_events
from tests.e2e.warm import warm
from tests.tools.mcp.servers import demo_http

# As tests/e2e/test_console.py launches it (not imported: that module skips itself without Playwright, and the
# chat tests here need no browser).
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def inventory(admin: httpx.Client) -> Iterator[dict[str, Any]]:
    with demo_http() as (url, _):
        r = admin.post(
            "/v1/admin/mcp-servers", json={"name": "inventory", "transport": "http", "url": url, "timeout_s": 3}
        )
        assert r.status_code == 201, r.text
        assert r.json()["state"] == "ready", r.json()
        try:
            yield r.json()
        finally:
            admin.delete("/v1/admin/mcp-servers/inventory")


def finished_tools(evs: list[Any]) -> dict[str, dict[str, Any]]:
    return {e.data["name"]: e.data for e in evs if e.event == "tool" and e.data["status"] != "running"}


def test_an_mcp_tool_is_listed_planned_called_streamed_recorded_and_replayed(
    client: httpx.Client, stack: Stack, admin: httpx.Client, inventory: dict[str, Any]
) -> None:
    listed = {t["function"]["name"] for t in client.get("/v1/tools").json()["data"]}
    assert {"inventory__lookup_stock", "orders", "docs"} <= listed, listed
    assert not any("." in n for n in listed)

    warm(client)
    evs, resp = chat(client, f"mcp-{uuid.uuid4().hex[:8]}", "How many units of SKU 'A-100' do you have in stock?")
    kinds = [e.event for e in evs]
    assert kinds and kinds[-1] == "done", kinds
    done = finished_tools(evs)
    call = done["inventory__lookup_stock"]
    assert call["status"] == "ok" and call["arguments"] == {"sku": "A-100"} and "42 units" in call["output"]
    assert max(i for i, k in enumerate(kinds) if k == "tool") < kinds.index("delta")

    rid = resp.headers["x-request-id"]
    rec = admin_record(stack, rid, lambda r: r["record"].get("status") == "complete" and r["record"].get("mcp"))
    record = rec["record"]
    assert record["mcp"][0]["server"] == "inventory" and record["mcp"][0]["status"] == "ok"
    assert "42 units in stock" in record["prompt"] and "<tool_results>" in record["prompt"]
    spans = {s["name"] for s in rec["spans"]}
    assert "execute_tool inventory__lookup_stock" in spans, spans

    replay = admin.post(f"/v1/admin/replay/{rid}", json={"mode": "pipeline"})
    assert replay.status_code == 200 and replay.json()["status"] == "complete", replay.text
    again = admin_record(stack, replay.json()["rid"], lambda r: r["record"].get("mcp"))
    assert again["record"]["mcp"][0]["name"] == "inventory__lookup_stock"


def test_a_hanging_mcp_server_costs_one_tool_error_not_the_answer(
    client: httpx.Client, inventory: dict[str, Any]
) -> None:
    warm(client)
    evs, resp = chat(client, f"mcp-{uuid.uuid4().hex[:8]}", "Use inventory__slow_report for 'Q3'.", max_tokens=16)
    assert resp.status_code == 200 and evs and evs[-1].event == "done", [e.event for e in evs][-3:]
    ended = [e.data for e in evs if e.event == "tool" and e.data["status"] != "running"]
    assert [(t["name"], t["status"]) for t in ended] == [("inventory__slow_report", "timeout")], ended
    assert any(e.event == "delta" for e in evs)


def test_the_console_shows_and_edits_a_registration(
    stack: Stack, admin: httpx.Client, inventory: dict[str, Any]
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        page.goto(f"{stack.url}/console?key={stack.admin_key}#/mcp")
        if page.is_visible("#url-key"):
            page.click("#url-key-accept")  # a link's key is only offered: the operator accepts it
        page.wait_for_function("() => document.body.dataset.ready === '/mcp'")
        row = page.locator('tr.mcp-row[data-server="inventory"]')
        assert row.get_attribute("data-state") == "ready"
        assert "inventory__lookup_stock" in row.locator(".mcp-tools").inner_text()
        row.locator("a.edit").click()
        page.wait_for_function(
            "() => document.body.dataset.ready === '/mcp' && !!document.querySelector('#mcp-form [readonly]')"
        )
        page.fill('#mcp-form input[name="timeout_s"]', "4")
        page.click('#mcp-form button[type="submit"]')
        page.wait_for_function(
            "() => document.body.dataset.ready === '/mcp' && !document.querySelector('#mcp-form [readonly]')"
        )
        browser.close()
    view = next(v for v in admin.get("/v1/admin/mcp-servers").json()["data"] if v["spec"]["name"] == "inventory")
    assert view["spec"]["timeout_s"] == 4 and view["state"] == "ready"


def responses_stream(client: httpx.Client, body: dict[str, Any]) -> tuple[list[Any], httpx.Response]:
    with client.stream("POST", "/v1/responses", json={**body, "stream": True}) as resp:
        if resp.status_code != 200:
            resp.read()
            return [], resp
        # The Open Responses stream ends with `[DONE]` after its last event.
        return [e for e in sse_events(resp) if e.data != "[DONE]"], resp


def as_function(client: httpx.Client, name: str) -> dict[str, Any]:
    """A tool of `GET /v1/tools`, as a Responses function tool: naming it offers the MCP tool to the model."""
    tool = next(t["function"] for t in client.get("/v1/tools").json()["data"] if t["function"]["name"] == name)
    return {"type": "function", **tool}


def mcp_items(evs: list[Any]) -> list[dict[str, Any]]:
    return [
        e.data["item"] for e in evs if e.event == "response.output_item.done" and e.data["item"]["type"] == "mcp_call"
    ]


def test_the_model_calls_an_mcp_tool_and_goes_on_with_its_result(
    client: httpx.Client, stack: Stack, admin: httpx.Client, inventory: dict[str, Any]
) -> None:
    warm(client)
    body = {
        "model": "SmolLM2-135M-Instruct",
        "temperature": 0,
        "input": "How many units of SKU A-100 are in stock?",
        "tools": [as_function(client, "inventory__lookup_stock")],
        # The engine decodes the forced call under the tool's schema: the model's own call, deterministically.
        "tool_choice": {"type": "function", "name": "inventory__lookup_stock"},
        # One call per turn: each ends at its `</tool_call>`, so a small model that repeats a call spends little.
        "parallel_tool_calls": False,
        "max_output_tokens": 200,
    }
    evs, resp = responses_stream(client, body)
    assert resp.status_code == 200, resp.text
    kinds = [e.event for e in evs]
    assert kinds[-1] == "response.completed", [e.data for e in evs if e.event.startswith("response.output_item")]
    calls = mcp_items(evs)
    assert calls and calls[0]["name"] == "inventory__lookup_stock" and calls[0]["status"] == "completed", calls
    assert calls[0]["output"] and "sku" in json.loads(calls[0]["arguments"])
    # The call ran on the server: the client gets no function call to run, and the answer comes after it.
    final = evs[-1].data["response"]
    assert not [o for o in final["output"] if o["type"] == "function_call"], final["output"]
    first_call = kinds.index("response.output_item.added")
    assert all(i > first_call for i, k in enumerate(kinds) if k == "response.output_text.delta")

    rid = resp.headers["x-request-id"]
    # The gateway's part (the logged request a replay starts from) lands when its run closes, after the answer.
    rec = admin_record(
        stack,
        rid,
        lambda r: (
            r["record"].get("status") == "complete" and r["record"].get("mcp_rounds") and r["record"].get("request")
        ),
    )
    record = rec["record"]
    first = record["mcp_rounds"][0]
    assert first["call"]["server"] == "inventory" and first["call"]["status"] == "ok", first
    assert first["event"]["output"] == calls[0]["output"]
    # The record's prompt is the last turn's: the model's call and its result, fenced as data.
    assert "<tool_call>" in record["prompt"] and "<tool_results>" in record["prompt"]
    assert calls[0]["output"].strip()[:40] in record["prompt"]
    assert "execute_tool inventory__lookup_stock" in {s["name"] for s in rec["spans"]}

    # An inference replay starts from that prompt, with the logged result in it (no call again).
    replay = admin.post(f"/v1/admin/replay/{rid}", json={"mode": "inference"})
    assert replay.status_code == 200 and replay.json()["status"] == "complete", replay.text


def test_a_hanging_mcp_tool_the_model_calls_costs_one_failed_call_not_the_answer(
    client: httpx.Client, inventory: dict[str, Any]
) -> None:
    warm(client)
    slow = as_function(client, "inventory__slow_report")
    body = {
        "model": "SmolLM2-135M-Instruct",
        "temperature": 0,
        "input": "Write the audit report for Q3.",
        # The client's schema may narrow the server's: one topic, so the forced call is short and exact.
        "tools": [
            {**slow, "parameters": {**slow["parameters"], "properties": {"topic": {"type": "string", "enum": ["Q3"]}}}}
        ],
        "tool_choice": {"type": "function", "name": "inventory__slow_report"},
        "parallel_tool_calls": False,
        "max_output_tokens": 200,
    }
    evs, resp = responses_stream(client, body)
    assert resp.status_code == 200, resp.text
    assert evs and evs[-1].event == "response.completed", [e.event for e in evs][-3:]
    calls = mcp_items(evs)
    assert calls and calls[0]["status"] == "failed" and "did not answer" in calls[0]["error"], calls
    assert json.loads(calls[0]["arguments"]) == {"topic": "Q3"}
