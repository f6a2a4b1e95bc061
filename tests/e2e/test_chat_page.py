"""The chat page in headless Chromium against the whole stack: stream, stop, reload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from tests.wait import wait_until

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="module")
def page(stack: Stack) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no browser at {CHROMIUM}")
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1280, "height": 860})
        pg.errors = []  # type: ignore[attr-defined]
        pg.on("pageerror", lambda e: pg.errors.append(str(e)))  # type: ignore[attr-defined]
        # The page runs under its own CSP: a violation would show up here as a console error.
        pg.on("console", lambda m: m.type == "error" and "404" not in m.text and pg.errors.append(m.text))  # type: ignore[attr-defined]
        yield pg
        browser.close()


def open_with_key(pg: Any, url: str) -> None:
    """`url` carries `?key=`: the page offers the key (unless it is already the saved one); accept it."""
    pg.goto(url)
    if pg.is_visible("#url-key"):
        pg.click("#url-key-accept")


def answers(pg: Any) -> list[dict[str, str]]:
    return pg.eval_on_selector_all(
        ".msg.assistant",
        "els => els.map(e => ({state: e.dataset.state, rid: e.dataset.rid || '', text: e.querySelector('.content').innerText}))",
    )


def test_send_stream_stop_and_reload(page: Any, stack: Stack, client: httpx.Client) -> None:
    pg = page
    open_with_key(pg, f"{stack.url}/?key={stack.api_key}")
    assert "key=" not in pg.url  # the key leaves the address bar
    pg.wait_for_selector("#input")

    # 1. A message: shown at once, answered as a stream, then done.
    question = "What is 2+2? Answer with a number only."
    pg.fill("#input", question)
    pg.keyboard.press("Enter")
    assert pg.inner_text(".msg.user .bubble") == question
    pg.wait_for_selector(".msg.assistant:not([data-state=streaming])", timeout=120_000)
    first = answers(pg)[0]
    assert first["state"] == "done", pg.inner_text(".msg.assistant")
    assert first["text"].strip() and len(first["rid"]) == 32
    chat_id = pg.evaluate("location.hash.slice(1)")
    assert chat_id

    # 2. A long answer, stopped mid-way: the partial text stays, and the stored turn says stopped.
    pg.fill("#input", "Write a very long story about a dragon and a knight.")
    pg.click("#send")
    wait_until(lambda: len(answers(pg)) == 2 and len(answers(pg)[1]["text"]) >= 20, 120, "the long answer to stream")
    assert answers(pg)[1]["state"] == "streaming"
    pg.click("#stop")
    pg.wait_for_selector(".msg.assistant[data-state=stopped]", timeout=10_000)
    partial = answers(pg)[1]["text"]
    assert partial.strip()

    def stopped_turn() -> dict[str, Any] | None:
        turns = client.get(f"/v1/conversations/{chat_id}").json().get("turns", [])
        return turns[-1] if len(turns) == 2 and turns[-1]["status"] == "stopped" else None

    turn = wait_until(stopped_turn, 20, "the stopped turn to be saved")
    assert turn["answer"] and turn["usage"]["completion_tokens"] < 256

    # 3. Feedback is offered on each answer (the endpoint may not exist yet: the page copes).
    pg.click(".msg.assistant >> nth=0 >> .feedback.up")

    # 4. A reload shows the whole thread from the server, title included.
    pg.reload()
    pg.wait_for_selector(".msg.assistant >> nth=1", timeout=10_000)
    got = answers(pg)
    assert [a["state"] for a in got] == ["done", "stopped"]
    assert got[0]["text"].strip() == first["text"].strip()
    assert pg.eval_on_selector_all(".msg.user .bubble", "els => els.map(e => e.innerText)")[0] == question
    title = client.get(f"/v1/conversations/{chat_id}").json()["title"]
    assert title and pg.inner_text("#chat-title") == title
    pg.wait_for_selector(f".conv.active[data-id='{chat_id}']")

    # The renderer escapes before it formats: markup in an answer stays text.
    html = pg.evaluate(
        "Markdown.render('<img src=x onerror=alert(1)> **bold** `a<b` [l](javascript:x)\\n```\\n<i>\\n```')"
    )
    assert "<img" not in html and "&lt;img" in html and "<strong>bold</strong>" in html
    assert "<code>a&lt;b</code>" in html and "href" not in html  # only http(s) links become links
    assert "<pre><code>&lt;i&gt;</code></pre>" in html

    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / "chat-page.png"))
    assert not pg.errors, pg.errors


def test_tool_steps_and_their_results_survive_a_reload(page: Any, stack: Stack) -> None:
    pg = page
    open_with_key(pg, f"{stack.url}/?key={stack.api_key}")
    pg.wait_for_selector("#new-chat")
    pg.click("#new-chat")
    pg.fill("#input", "What is the status of my order A1001?")
    pg.keyboard.press("Enter")
    pg.wait_for_selector(".msg.assistant:not([data-state=streaming])", timeout=120_000)
    steps = "els => els.map(e => [e.querySelector('.step-title').innerText, e.querySelector('.step-body').textContent])"
    live = pg.eval_on_selector_all(".msg.assistant .step.tool", steps)
    assert any(title.startswith("orders — ok") and "A1001" in body for title, body in live), live
    # Reloaded from the stored turn: the same steps, with their arguments and output.
    pg.reload()
    pg.wait_for_selector(".msg.assistant .step.tool", timeout=10_000)
    assert pg.eval_on_selector_all(".msg.assistant .step.tool", steps) == live
    assert not pg.errors, pg.errors
