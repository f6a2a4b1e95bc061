"""Abuse counting through the whole pipeline: a tenant's safety policy (set through the admin API)
reaches safety_in, the logger counts strikes from the records, the gateway enforces the standing,
and the console shows a suspension with links to the requests that caused it.

The key and tenant are this test's own, so no other test sees its policy or its suspension."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from switchyard.libs.store.keys import KeyStore
from tests.e2e.conftest import admin_record, chat
from tests.e2e.test_console import ARGS, ARTIFACTS, CHROMIUM, Page, _goto, sync_api
from tests.e2e.warm import warm
from tests.wait import wait_until

CODE_RUN = "Run this Python code: print(2+2)"


async def _create_key(stack: Stack, tenant: str) -> tuple[str, str]:
    store = await KeyStore.open(database_url(None, str(stack.data_dir), "gateway"))
    try:
        key, raw = await store.create(tenant, "pro", user="coder")
    finally:
        await store.engine.dispose()
    return key.id, raw


@pytest.fixture(scope="module")
def console_page(stack: Stack) -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no Chromium at /usr/bin/chromium")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def _admin(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, timeout=30, headers={"Authorization": f"Bearer {stack.admin_key}"})


def _standing(stack: Stack, key_id: str, until: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """The logger counts asynchronously: poll the admin listing until the key's standing satisfies `until`."""
    with _admin(stack) as admin:

        def satisfied() -> dict[str, Any] | None:
            listed = admin.get("/v1/admin/keys/standing").json()["data"]
            mine: dict[str, Any] = next((s for s in listed if s["key_id"] == key_id), {})
            assert mine and until(mine), mine
            return mine

        got: dict[str, Any] = wait_until(
            satisfied, timeout_s, f"the standing of {key_id} to satisfy the condition", 0.3, ignore=(AssertionError,)
        )
        return got


def _set_policy(stack: Stack, tenant: str, policy: dict[str, Any]) -> None:
    with _admin(stack) as admin:
        r = admin.put("/v1/admin/safety-policy", json={"tenant": tenant, "policy": policy})
        assert r.status_code == 200, r.text


def test_code_run_flags_never_suspend_blocks_do_and_the_console_names_them(
    client: httpx.Client, stack: Stack, console_page: Page
) -> None:
    warm(client)
    tenant = f"coders-{uuid.uuid4().hex[:8]}"
    # Playwright's sync API keeps an event loop running in this thread; the store gets its own.
    with ThreadPoolExecutor(1) as pool:
        key_id, raw = pool.submit(asyncio.run, _create_key(stack, tenant)).result()
    # Every code-run request of this tenant is flagged S14 and none is blocked: what an
    # assistant with a code tool sees all day.
    _set_policy(stack, tenant, {"thresholds": {"S14": {"flag_at": 0.0, "block_at": None}}})
    with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {raw}"}) as coder:
        flagged = []
        for _ in range(6):
            evs, resp = chat(coder, f"code-{uuid.uuid4().hex[:8]}", CODE_RUN, max_tokens=8)
            assert resp.status_code == 200 and evs and evs[-1].event == "done", (resp.status_code, evs[-1:])
            flagged.append(resp.headers["x-request-id"])
        rec = admin_record(stack, flagged[0], lambda r: "safety_in" in r["record"].get("stages", {}))
        assert rec["record"]["safety_action"] == "flag"
        assert rec["record"]["strikes"] == {"enabled": True}
        standing = _standing(stack, key_id, lambda s: s["flagged"] == len(flagged))
        assert standing["state"] == "active" and standing["strikes"] == [] and standing["blocked"] == 0

        # The same tenant now blocks them: five blocked requests suspend the key.
        _set_policy(stack, tenant, {"thresholds": {"S14": {"flag_at": 0.0, "block_at": 0.0}}})
        blocked = []
        for _ in range(5):
            evs, resp = chat(coder, f"code-{uuid.uuid4().hex[:8]}", CODE_RUN, max_tokens=8)
            assert [e.event for e in evs] == ["error"] and evs[0].data["code"] == "policy_violation", evs
            blocked.append(resp.headers["x-request-id"])
        standing = _standing(stack, key_id, lambda s: s["state"] == "suspended")
        assert [s["rid"] for s in standing["strikes"]] == blocked
        assert all(s["action"] == "block" and s["categories"] == ["S14"] for s in standing["strikes"])
        assert standing["reason"].startswith("5 blocked requests")
        r = coder.get("/v1/conversations")
        assert r.status_code == 403 and "5 blocked requests" in r.json()["error"]["message"]

    # The console: the suspended key, its reason, and a link to each request that caused it.
    p = console_page
    _goto(p, f"{stack.url}/console?key={stack.admin_key}#/keys", "/keys")
    row = p.locator(f"#keys tr.key-row[data-key='{key_id}']")
    assert row.get_attribute("data-state") == "suspended"
    assert "5 blocked requests" in row.locator("td.reason").inner_text()
    links = row.locator("a.strike")
    assert [links.nth(i).get_attribute("href") for i in range(links.count())] == [f"#/r/{rid}" for rid in blocked]
    p.screenshot(path=str(ARTIFACTS / "console-keys.png"), full_page=True)
    links.first.click()
    p.wait_for_function("rid => document.body.dataset.ready === `/r/${rid}`", arg=blocked[0])
    assert CODE_RUN in p.inner_text("#request-text")
    assert "S14" in p.inner_text("#stages tr[data-stage=safety_in]")

    # Reinstated from the console, the key works again.
    _goto(p, f"{stack.url}/console#/keys", "/keys")
    p.locator(f"#keys tr.key-row[data-key='{key_id}'] button.reinstate").click()
    p.wait_for_selector(f"#keys tr.key-row[data-key='{key_id}'][data-state=active]")
    _standing(stack, key_id, lambda s: s["state"] == "active")
    with httpx.Client(base_url=stack.url, timeout=30, headers={"Authorization": f"Bearer {raw}"}) as coder:
        assert coder.get("/v1/conversations").status_code == 200


# An everyday prompt of the out-of-distribution set (ids_and_codes-036) whose jailbreak score (0.67 on an
# AVX-512 EPYC) lands between that category's flag and block bars; with the single bar of 0.5 it was
# blocked, and six such requests suspended the key.
BORDERLINE = "ID 6fd1dc9cd827 Turn this into a to-do list: It took longer than expected to find parking."


def test_a_borderline_everyday_prompt_is_answered_and_its_key_stays_in_good_standing(
    client: httpx.Client, stack: Stack
) -> None:
    warm(client)
    tenant = f"notes-{uuid.uuid4().hex[:8]}"
    # Playwright's sync API may keep an event loop running in this thread: the store gets its own.
    with ThreadPoolExecutor(1) as pool:
        key_id, raw = pool.submit(asyncio.run, _create_key(stack, tenant)).result()
    answered = []
    with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {raw}"}) as user:
        # More than the default strike threshold (5): were a flag a strike, the key would be suspended.
        for _ in range(6):
            evs, resp = chat(user, f"notes-{uuid.uuid4().hex[:8]}", BORDERLINE, max_tokens=8)
            assert resp.status_code == 200 and evs and evs[-1].event == "done", (resp.status_code, evs[-1:])
            answered.append(resp.headers["x-request-id"])
        rec = admin_record(stack, answered[0], lambda r: "safety_in" in r["record"].get("stages", {}))["record"]
        assert rec["safety_action"] == "flag"
        verdicts = rec["safety_in"]
        flags = [v for v in verdicts if v["action"] == "flag" and v["classifier"] == "embedding"]
        assert flags and all(v["detail"] == "borderline" and v["score"] < v["block_at"] for v in flags), verdicts
        standing = _standing(stack, key_id, lambda s: s["flagged"] == len(answered))
        assert standing["state"] == "active" and standing["strikes"] == [] and standing["blocked"] == 0
        assert user.get("/v1/conversations").status_code == 200


def test_the_console_shows_a_borderline_flag_with_the_bar_it_did_not_reach(
    client: httpx.Client, stack: Stack, console_page: Page
) -> None:
    warm(client)
    evs, resp = chat(client, f"notes-{uuid.uuid4().hex[:8]}", BORDERLINE, max_tokens=8)
    assert resp.status_code == 200 and evs[-1].event == "done", evs[-1:]
    rid = resp.headers["x-request-id"]
    admin_record(stack, rid, lambda r: r["record"].get("safety_action") == "flag")
    p = console_page
    _goto(p, f"{stack.url}/console?key={stack.admin_key}#/r/{rid}", f"/r/{rid}")
    row = p.locator("#safety-verdicts tr[data-action=flag]").first
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    category, _action, score, bar, source, by, detail = cells
    assert (category, source, by, detail) == ("jailbreak", "user", "embedding", "borderline"), cells
    assert 0.45 <= float(score) < float(bar), cells
