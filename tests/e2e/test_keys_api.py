"""Keys an operator manages over HTTP, on the real stack with a second gateway (issue 30): a key created
on one gateway works on both at once, its usage from the request records matches what the SDK was told,
and once revoked on one gateway both refuse it at once. Then the console's Keys page in Chromium: create
(the secret shown once), use, rotate, usage, revoke."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.bus.embedded import free_port
from tests.e2e.warm import warm
from tests.wait import wait_until

MODEL = "SmolLM2-135M-Instruct"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip


@pytest.fixture(scope="module")
def second_gateway(stack: Stack, client: httpx.Client) -> Iterator[str]:
    warm(client)
    port = free_port()
    stack.start_service("gateway", {**stack.service_env, "SWITCHYARD_PORT": str(port)}, replica="keys2")
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        return httpx.get(f"{url}/readyz", timeout=3).status_code == 200

    wait_until(ready, 120, f"the second gateway to be ready (see {stack.data_dir}/logs)", 0.5, (httpx.HTTPError,))
    yield url
    stack.stop_service("gateway-keys2")


def admin_client(url: str, stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=30)


def usage_when(admin: httpx.Client, key_id: str, requests: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """The key's usage once the logger has stored `requests` complete records with their tokens."""

    def counted() -> dict[str, Any] | None:
        got = admin.get(f"/v1/admin/keys/{key_id}/usage")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body if body["total"]["requests"] >= requests and body["total"]["completion_tokens"] > 0 else None

    usage: dict[str, Any] = wait_until(counted, timeout_s, f"{requests} requests counted for {key_id}", 0.3)
    return usage


def ask(sdk: openai.OpenAI, text: str) -> Any:
    return sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=8)


def test_key_lifecycle_on_two_gateways(stack: Stack, second_gateway: str) -> None:
    a, b = admin_client(stack.url, stack), admin_client(second_gateway, stack)
    tenant = f"keys-{uuid.uuid4().hex[:6]}"
    made = a.post(
        "/v1/admin/keys", json={"tenant": tenant, "tier": "pro", "name": "e2e", "budget_tokens_per_day": 100000}
    )
    assert made.status_code == 201, made.text
    key_id, secret = made.json()["id"], made.json()["key"]
    on_a = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=secret, max_retries=0)
    on_b = openai.OpenAI(base_url=f"{second_gateway}/v1", api_key=secret, max_retries=0)
    answers = [ask(on_a, "Name a colour."), ask(on_b, "Name a fruit."), ask(on_a, "Name a city.")]
    sent_prompt = sum(r.usage.prompt_tokens for r in answers)
    sent_completion = sum(r.usage.completion_tokens for r in answers)

    usage = usage_when(b, key_id, 3)
    total = usage["total"]
    assert (total["requests"], total["prompt_tokens"], total["completion_tokens"]) == (3, sent_prompt, sent_completion)
    assert total["total_tokens"] == sent_prompt + sent_completion
    assert sum(m["requests"] for m in usage["by_model"]) == 3 and len(usage["by_day"]) in (1, 2)
    assert sum(d["total_tokens"] for d in usage["by_day"]) == total["total_tokens"]
    # The budget both gateways debited counts the same tokens.
    assert usage["budgets"]["day"]["spent"] == sent_prompt + sent_completion
    assert usage["budgets"]["day"]["limit"] == 100000

    # Listed (by tenant) without its secret.
    listed = a.get(f"/v1/admin/keys?tenant={tenant}").json()["data"]
    assert [k["id"] for k in listed] == [key_id] and secret not in str(listed)

    # Revoked on the second gateway: refused on both at once (each had the key in its cache).
    assert b.post(f"/v1/admin/keys/{key_id}/revoke").json()["state"] == "revoked"
    for sdk in (on_a, on_b):
        with pytest.raises(openai.AuthenticationError):
            ask(sdk, "Still there?")


# ---- the console's Keys page ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(stack: Stack) -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        pg.set_default_timeout(30_000)
        pg.on("dialog", lambda d: d.accept())  # the revoke confirmation
        yield pg
        browser.close()


def _goto(page: Any, url: str, ready: str) -> None:
    page.goto(url)
    if "key=" in url and page.is_visible("#url-key"):
        page.click("#url-key-accept")  # a link's key is only offered: the operator accepts it
    page.wait_for_function(
        "ready => document.body.dataset.ready === ready || document.body.dataset.ready === 'error'", arg=ready
    )
    err = page.locator("#error")
    assert err.count() == 0, err.inner_text()


def test_console_keys_page(page: Any, stack: Stack, second_gateway: str) -> None:
    p = page
    tenant = f"console-{uuid.uuid4().hex[:6]}"
    _goto(p, f"{stack.url}/console?key={stack.admin_key}#/keys", "/keys")

    p.fill("#create-key input[name=tenant]", tenant)
    p.fill("#create-key input[name=name]", "from the console")
    p.fill("#create-key input[name=models]", MODEL)
    p.fill("#create-key input[name=budget_tokens_per_day]", "50000")
    p.click("#create-key button[type=submit]")
    p.wait_for_selector("#new-secret")
    secret = p.inner_text("#secret-value").strip()
    assert secret.startswith("sy-")
    key_id = p.inner_text("#new-secret h2").split(": ")[-1].strip()
    row = p.locator(f"tr.api-key-row[data-key='{key_id}']")
    assert row.get_attribute("data-state") == "active"
    assert MODEL in row.inner_text() and "50000" in row.inner_text() and secret not in p.inner_text("#api-keys")
    p.screenshot(path=str(ARTIFACTS / "console-keys.png"), full_page=True)

    # The secret works at once, on either gateway.
    sdk = openai.OpenAI(base_url=f"{second_gateway}/v1", api_key=secret, max_retries=0)
    answer = ask(sdk, "Say hello.")

    # Rotate: a new secret, shown once; the old one is refused at once.
    row.locator("button.rotate").click()
    p.wait_for_function(
        "old => { const e = document.querySelector('#secret-value'); return e && e.textContent.trim() !== old; }",
        arg=secret,
    )
    rotated = p.inner_text("#secret-value").strip()
    with pytest.raises(openai.AuthenticationError):
        ask(sdk, "Old key?")
    sdk = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=rotated, max_retries=0)
    second = ask(sdk, "New key?")

    # Usage: both requests, from the records, once the logger has stored them (then the page shows them).
    want = answer.usage.total_tokens + second.usage.total_tokens
    usage = usage_when(admin_client(stack.url, stack), key_id, 2)
    assert usage["total"]["total_tokens"] == want
    _goto(p, f"{stack.url}/console#/keys/{key_id}", f"/keys/{key_id}")
    text = p.inner_text("#usage-total")
    assert f"total tokens\n{want}" in text and "requests\n2" in text, text
    assert f"{want} of 50000" in text  # the budget the gateways debited, the same tokens
    assert p.locator("#usage-by-model tbody tr").count() == 1
    p.screenshot(path=str(ARTIFACTS / "console-key-usage.png"), full_page=True)

    # Revoke from the list: the row says so and the key is refused.
    _goto(p, f"{stack.url}/console#/keys?tenant={tenant}", "/keys")
    p.locator(f"tr.api-key-row[data-key='{key_id}'] button.revoke").click()
    p.wait_for_selector(f"tr.api-key-row[data-key='{key_id}'][data-state='revoked']")
    with pytest.raises(openai.AuthenticationError):
        ask(sdk, "Revoked?")
