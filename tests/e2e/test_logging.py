"""Logging that loses nothing, and traces that follow the OpenTelemetry conventions."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record, chat
from tests.e2e.warm import warm
from tests.wait import wait_until

EIGHT = {"gateway", "context", "safety_in", "router", "tools", "inference", "safety_out", "logger"}


def _admin(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=30)


def test_requests_served_while_the_logger_is_down_are_all_logged_once(client: httpx.Client, stack: Stack) -> None:
    warm(client)
    tag = uuid.uuid4().hex[:6]
    stack.stop_service("logger")
    try:

        def one(i: int) -> str:
            evs, resp = chat(client, f"down-{tag}-{i}", f"Say the number {i}.", max_tokens=6)
            assert resp.status_code == 200 and evs and evs[-1].event == "done", (resp.status_code, evs[-1:])
            return str(resp.headers["x-request-id"])

        with ThreadPoolExecutor(4) as pool:
            rids = list(pool.map(one, range(20)))
    finally:
        stack.restart_service("logger")
    assert len(set(rids)) == 20
    since = int(time.time() * 1000) - 300_000
    with _admin(stack) as admin:

        def all_logged() -> list[str]:
            listed: list[str] = []
            cursor = None
            while True:
                params: dict[str, Any] = {"since": since, "limit": 500, "replays": "false"}
                if cursor:
                    params["cursor"] = cursor
                r = admin.get("/v1/admin/requests", params=params)
                if r.status_code != 200:
                    break
                body = r.json()
                listed += [x["rid"] for x in body["items"] if x["rid"] in rids and x["status"] == "complete"]
                cursor = body["next_cursor"]
                if not cursor:
                    break
            assert sorted(listed) == sorted(rids), f"{len(set(listed))} of 20 logged"
            return listed

        listed = wait_until(all_logged, 45, "all 20 records listed complete", 0.5, ignore=(AssertionError,))
    assert sorted(listed) == sorted(rids), f"{len(set(listed))} of 20 logged"
    assert all(listed.count(r) == 1 for r in rids)
    rec = admin_record(stack, rids[0], lambda x: {"gateway", "inference", "safety_out"} <= set(x["record"]["stages"]))
    assert rec["record"]["request"]["text"] == "Say the number 0."


def test_record_carries_every_stage(client: httpx.Client, stack: Stack) -> None:
    evs, resp = chat(client, f"rec-{uuid.uuid4().hex[:8]}", "What is the status of my order A1001?", max_tokens=24)
    assert evs[-1].event == "done"
    rid = resp.headers["x-request-id"]
    rec = admin_record(
        stack,
        rid,
        lambda x: (
            {"gateway", "context", "safety_in", "router", "tools", "inference", "safety_out"}
            <= set(x["record"]["stages"])
        ),
    )["record"]
    assert (
        rec["request"]["text"] == "What is the status of my order A1001?"
        and rec["request"]["sampling"]["seed"] is not None
    )
    # The final prompt (the tools stage's, with the order's data) wins over context's.
    assert "A1001" in rec["prompt"] and rec["sources"]["prompt"] == "tools"
    assert isinstance(rec["safety_in"], list) and rec["safety_action"] in ("allow", "flag")
    assert rec["route"]["replica"] and rec["route"]["model"]
    assert any(t["name"] == "orders" for t in rec["tools"])
    assert rec["output"] and rec["raw_output"] and rec["status"] == "complete"
    usage = rec["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0 and "cached_tokens" in usage
    assert rec["ttft_ms"] > 0 and rec["tpot_ms"] > 0 and len(rec["trace_id"]) == 32
    assert rec["mode"] in ("fast", "reasoning")


def test_spans_follow_messaging_and_genai_conventions(client: httpx.Client, stack: Stack) -> None:
    _evs, resp = chat(client, f"otel-{uuid.uuid4().hex[:8]}", "Say hello.", max_tokens=8)
    rid = resp.headers["x-request-id"]
    # Inference's generation span ends after its hand-over ack span, and is exported after it: wait for both.
    rec = admin_record(
        stack,
        rid,
        lambda x: (
            EIGHT <= {s["service"] for s in x["spans"]}
            and any(s["service"] == "inference" and s["name"].startswith("chat ") for s in x["spans"])
        ),
    )
    spans = rec["spans"]
    consumers = [s for s in spans if s["kind"] == "consumer"]
    assert {s["service"] for s in consumers} >= EIGHT - {"gateway"}
    for s in consumers:
        a = s["attributes"]
        assert a["messaging.system"] == "nats", s
        assert a["messaging.operation.type"] == "process" and a["messaging.destination.name"], s
        assert s["name"].startswith("process ") or s["name"].startswith("store "), s["name"]
        assert "<" not in s["name"] and rid not in s["name"], "span names stay low-cardinality"
    server = [s for s in spans if s["service"] == "gateway" and s["kind"] == "server"]
    assert server and server[0]["attributes"]["http.route"] == "/chat"
    (infer,) = [s for s in spans if s["service"] == "inference" and s["name"].startswith("chat ")]
    a = infer["attributes"]
    assert infer["kind"] == "client" and infer["name"] == f"chat {a['gen_ai.request.model']}"
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"]
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] in (["stop"], ["length"])
    assert a["gen_ai.request.seed"] == rec["record"]["request"]["sampling"]["seed"]
    first = [e for e in infer["events"] if e["name"] == "gen_ai.first_token"]
    assert first and first[0]["attributes"]["ttft_ms"] > 0
    # The event marks the first token: inside the span, and before its end when more tokens followed.
    assert infer["start_ns"] <= first[0]["time_ns"] <= infer["end_ns"]
    if a["gen_ai.usage.output_tokens"] > 1:
        assert first[0]["time_ns"] < infer["end_ns"]
