"""Models added and removed at run time on the whole stack (the session's, its supervisor's pool manager
included): a second copy of the bundled SmolLM2 GGUF added through `POST /v1/admin/models` serves chats under
its name and alias and is listed; removed while a stream is in flight, the stream finishes, its pool's process
is gone and the model is a 404. Bad entries are 400s that name the reason, and the default model serves on. The console's Models
page does the same through the same routes."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME, default_model_path
from switchyard.schemas.embeddings import EMBEDDING_MODEL
from tests.e2e.conftest import admin_record
from tests.e2e.warm import warm
from tests.libs.models.test_admit import gguf_file

pytestmark = pytest.mark.e2e

NAME, ALIAS, POOL = "smol-copy", "smol-two", "smolcopy"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    # A pool's start converts nothing (the weights cache is keyed by the file's content) but loads a model.
    with httpx.Client(base_url=stack.url, timeout=600, headers={"Authorization": f"Bearer {stack.admin_key}"}) as c:
        yield c


def completion(client: httpx.Client, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, **extra}
    return client.post("/v1/chat/completions", json=body)


def listed(client: httpx.Client) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in client.get("/v1/models").json()["data"]}


def test_a_model_added_at_run_time_serves_and_once_removed_is_a_404(
    stack: Stack, client: httpx.Client, admin: httpx.Client, tmp_path: Path
) -> None:
    warm(client)
    copy = tmp_path / "smol-copy.gguf"
    shutil.copyfile(default_model_path(), copy)
    card = {"name": NAME, "aliases": [ALIAS], "pool": POOL, "engine": "native", "path": str(copy)}
    card |= {"context_length": 4096, "owner": "ops", "capabilities": ["chat", "completion"]}

    r = admin.post("/v1/admin/models", json=card)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == NAME and r.json()["path"] == str(copy)
    assert f"inference-{POOL}" in stack.procs

    models = listed(client)
    assert models[NAME]["context_length"] == 4096 and models[NAME]["owned_by"] == "ops"
    assert models[NAME]["kind"] == "generation" and models[EMBEDDING_MODEL]["kind"] == "embedding"
    entries = {e["card"]["name"]: e for e in admin.get("/v1/admin/models").json()["data"]}
    assert entries[NAME]["state"] == "serving" and {b["pool"] for b in entries[NAME]["replicas"]} == {POOL}

    for model in (NAME, ALIAS):
        r = completion(client, model)
        assert r.status_code == 200, r.text
        done = r.json()
        assert done["model"] == NAME and done["choices"][0]["message"]["content"]
    # Served by the new pool, not the default one.
    record = admin_record(stack, r.headers["x-request-id"], lambda rec: "route" in rec["record"])["record"]
    assert record["route"]["pool"] == POOL and record["route"]["model"] == NAME

    # Removed while one of its streams is in flight: that stream finishes, the next request is a 404.
    body = {"model": NAME, "messages": [{"role": "user", "content": "Count to fifty."}], "stream": True}
    body |= {"max_tokens": 48, "ignore_eos": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: {"))
        assert json.loads(first[6:])["model"] == NAME
        r = admin.delete(f"/v1/admin/models/{NAME}")
        assert r.status_code == 200, r.text
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    finishes = [json.loads(x[6:])["choices"][0].get("finish_reason") for x in rest[:-1] if '"choices":[{' in x]
    assert "length" in finishes, rest[-5:]

    assert f"inference-{POOL}" not in stack.procs
    for model in (NAME, ALIAS):
        r = completion(client, model)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert NAME not in listed(client)
    assert admin.delete(f"/v1/admin/models/{NAME}").status_code == 404
    assert completion(client, DEFAULT_MODEL_NAME).status_code == 200


def test_a_bad_entry_is_a_400_and_the_running_pools_are_untouched(
    stack: Stack, client: httpx.Client, admin: httpx.Client, tmp_path: Path
) -> None:
    warm(client)
    procs = {tag: p.pid for tag, p in stack.procs.items()}
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    bert = gguf_file(tmp_path / "bert.gguf", "bert")
    base = {"name": "bad-one", "pool": "bad"}
    cases = [
        ({**base}, "path is required"),
        ({**base, "path": str(tmp_path / "absent.gguf")}, "does not exist"),
        ({**base, "path": str(notes)}, "is not a GGUF file"),
        ({**base, "path": str(tmp_path)}, "has no config.json"),
        ({**base, "path": bert}, "'bert' is not served by the native engine"),
        ({**base, "path": default_model_path(), "name": "SmolLM2"}, "is already served"),
        ({**base, "path": default_model_path(), "pool": "a.b"}, "pool"),
    ]
    for entry, why in cases:
        r = admin.post("/v1/admin/models", json=entry)
        assert r.status_code == 400 and why in r.json()["error"]["message"], (entry, r.text)
    assert {tag: p.pid for tag, p in stack.procs.items()} == procs
    assert all(p.poll() is None for p in stack.procs.values())
    assert "bad-one" not in listed(client)
    r = completion(client, DEFAULT_MODEL_NAME)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


def test_a_pool_that_cannot_start_is_an_error_with_its_log_and_leaves_no_entry(
    stack: Stack, client: httpx.Client, admin: httpx.Client, tmp_path: Path
) -> None:
    # A checkpoint directory the native engine cannot load: its pool exits while starting.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nonesuch"}))
    card = {"name": "broken", "pool": "broken", "engine": "native", "path": str(tmp_path)}
    started = time.monotonic()
    r = admin.post("/v1/admin/models", json=card)
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert "broken" in err["message"] and "the entry was removed" in err["message"] and err["log_tail"], err
    assert time.monotonic() - started < 300
    assert "inference-broken" not in stack.procs and "broken" not in listed(client)
    assert completion(client, DEFAULT_MODEL_NAME).status_code == 200


def test_the_console_models_page_adds_and_removes_a_model(stack: Stack, client: httpx.Client, tmp_path: Path) -> None:
    """The console's Models page over the same routes: a model on the simulated engine (it starts in seconds)
    added with the form, listed as serving, removed with its button."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    warm(client)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(30_000)
        page.on("dialog", lambda d: d.accept())
        try:
            page.goto(f"{stack.url}/console?key={stack.admin_key}#/models")
            page.click("#url-key-accept")  # a link's key is only offered
            page.wait_for_function("() => document.body.dataset.ready === '/models'")
            assert page.locator(f'tr.model-row[data-model="{DEFAULT_MODEL_NAME}"] button.remove').count() == 0
            form = page.locator("#add-model")
            form.locator('input[name="name"]').fill("sim-console")
            form.locator('input[name="pool"]').fill("simconsole")
            form.locator('input[name="path"]').fill(default_model_path())
            form.locator('select[name="engine"]').select_option("sim")
            form.locator('button[type="submit"]').click()
            row = page.locator('tr.model-row[data-model="sim-console"]')
            row.wait_for(timeout=300_000)
            assert row.get_attribute("data-state") == "serving"
            assert "sim-console" in listed(client)
            row.locator("button.remove").click()
            row.wait_for(state="detached", timeout=120_000)
        finally:
            browser.close()
    assert "sim-console" not in listed(client) and "inference-simconsole" not in stack.procs
