"""Replays over the real stack: a greedy or seeded request reproduces token for token; a pipeline replay
leaves the original conversation as it was; the CLI replays an exported set and exports datasets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record, chat
from tests.e2e.warm import warm
from tests.wait import wait_until


def _admin(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=120)


def _finished(stack: Stack, rid: str) -> dict[str, Any]:
    return admin_record(stack, rid, lambda r: "raw_output" in r["record"] and "request" in r["record"])


def _ask(client: httpx.Client, chat_id: str, text: str, **kw: Any) -> str:
    warm(client)
    evs, resp = chat(client, chat_id, text, **kw)
    assert resp.status_code == 200 and evs[-1].event == "done", evs[-1:]
    return str(resp.headers["x-request-id"])


def test_greedy_and_seeded_requests_replay_exactly(client: httpx.Client, stack: Stack) -> None:
    greedy = _ask(client, f"rg-{uuid.uuid4().hex[:8]}", "Name three colors.", temperature=0, max_tokens=20)
    seeded = _ask(
        client,
        f"rs-{uuid.uuid4().hex[:8]}",
        "Write a short line about rain.",
        temperature=0.9,
        seed=1234,
        max_tokens=20,
    )
    with _admin(stack) as admin:
        for rid in (greedy, seeded):
            original = _finished(stack, rid)["record"]
            r = admin.post(f"/v1/admin/replay/{rid}", json={"mode": "inference"})
            assert r.status_code == 200, r.text
            res = r.json()
            assert res["status"] == "complete" and res["replay_of"] == rid
            assert res["matched"], res["diff"]
            assert res["output"] == original["raw_output"] and res["diff"] == ""
        # A different seed is a variant: the result says whether it changed and shows where.
        r = admin.post(f"/v1/admin/replay/{seeded}", json={"mode": "inference", "overrides": {"seed": 99}})
        res = r.json()
        assert r.status_code == 200 and res["overrides"] == {"seed": 99}
        assert res["matched"] == (res["output"] == res["original_output"])
        if not res["matched"]:
            assert res["diff"].startswith("--- original") and res["segments"]
        # The replay is a record of its own, linked to its original.
        rec = admin_record(stack, res["rid"], lambda x: x["record"].get("replay_of") == seeded)["record"]
        assert rec["api"] == "replay" and rec["replay_mode"] == "inference" and rec["sampling"]["seed"] == 99
        listed = admin.get("/v1/admin/requests", params={"replay_of": seeded}).json()["items"]
        assert res["rid"] in {x["rid"] for x in listed}
        original = admin_record(stack, seeded, lambda x: len(x["record"].get("replays", [])) >= 2)
        assert res["rid"] in {x["rid"] for x in original["record"]["replays"]}


def test_pipeline_replay_leaves_the_conversation_unchanged(client: httpx.Client, stack: Stack) -> None:
    chat_id = f"rp-{uuid.uuid4().hex[:8]}"
    _ask(client, chat_id, "Tell me one fact about the moon.", temperature=0, max_tokens=16)
    second = _ask(client, chat_id, "And one about the sun?", temperature=0, max_tokens=16)
    _ask(client, chat_id, "Now name a planet.", temperature=0, max_tokens=8)
    before = client.get(f"/v1/conversations/{chat_id}").json()
    _finished(stack, second)
    with _admin(stack) as admin:
        r = admin.post(f"/v1/admin/replay/{second}", json={"mode": "pipeline"})
        assert r.status_code == 200, r.text
        res = r.json()
        # Same history (the first turn only, not the later third one), same seed, greedy: same answer.
        assert res["status"] == "complete" and res["matched"], res["diff"]
        variant = admin.post(
            f"/v1/admin/replay/{second}", json={"mode": "pipeline", "overrides": {"max_tokens": 4}}
        ).json()
        assert variant["status"] == "complete" and variant["usage"]["completion_tokens"] <= 4
    assert client.get(f"/v1/conversations/{chat_id}").json() == before
    rec = admin_record(stack, res["rid"], lambda x: "prompt" in x["record"] and x["record"].get("replay_of"))["record"]
    assert rec["replay_of"] == second and rec["replay_mode"] == "pipeline" and rec["request"]["chat_id"] is None
    assert [m["content"] for m in rec["request"]["messages"]][:1] == ["Tell me one fact about the moon."]
    assert "name a planet" not in rec["prompt"]
    assert set(rec["stages"]) >= {"gateway", "context", "safety_in", "router", "tools", "inference", "safety_out"}


def _cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SWITCHYARD_URL": stack.url, "SWITCHYARD_ADMIN_KEY": stack.admin_key}
    return subprocess.run(
        [sys.executable, "-m", "switchyard.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_cli_exports_and_replays_a_set(client: httpx.Client, stack: Stack, tmp_path: Path) -> None:
    since = str(int(time.time() * 1000))
    a = _ask(client, f"cx-{uuid.uuid4().hex[:8]}", "Say yes.", temperature=0, max_tokens=8)
    b = _ask(client, f"cx-{uuid.uuid4().hex[:8]}", "Say no.", temperature=0.7, max_tokens=8)
    for rid in (a, b):
        _finished(stack, rid)
    r = client.post("/v1/feedback/preference", json={"rid_a": a, "rid_b": b, "chosen": "a"})
    assert r.status_code == 202, r.text
    out = tmp_path / "requests.jsonl"
    got = _cli(stack, "export", "--requests", str(out), "--since", since, "--status", "complete")
    assert got.returncode == 0, got.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {row["rid"] for row in rows} >= {a, b}
    assert all(row["prompt"] and row["output"] is not None and row["sampling"]["seed"] is not None for row in rows)
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps(row) + "\n" for row in rows if row["rid"] in (a, b)))
    got = _cli(stack, "replay", "--from", str(mine))
    assert got.returncode == 0, got.stderr
    assert "2 replayed: 2 same, 0 changed, 0 failed" in got.stderr, got.stdout + got.stderr
    got = _cli(stack, "replay", a)
    assert got.returncode == 0 and "matched token for token" in got.stdout, got.stdout + got.stderr
    prefs = tmp_path / "prefs.jsonl"

    def exported() -> dict[str, Any] | None:
        got = _cli(stack, "export", "--preferences", str(prefs))
        assert got.returncode == 0, got.stderr
        pairs = [json.loads(line) for line in prefs.read_text().splitlines()]
        return next((p for p in pairs if p["chosen_rid"] == a), None)

    pair = wait_until(exported, 20, f"the preference pair chosen {a}", 0.5)
    assert pair is not None and pair["rejected_rid"] == b and pair["prompt"] and pair["chosen"] and pair["rejected"]
