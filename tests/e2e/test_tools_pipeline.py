"""A two-part question plans both tools, runs them before the first token, and the prompt holds both results."""

from __future__ import annotations

import uuid

import httpx

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record, chat


def test_two_part_question_uses_orders_and_policy(client: httpx.Client, stack: Stack) -> None:
    text = "What is the delivery status of my order, and what's your policy if it arrives damaged?"
    chat_id = f"t-{uuid.uuid4().hex[:8]}"
    evs, resp = chat(client, chat_id, text)
    kinds = [e.event for e in evs]
    assert kinds[-1] == "done", kinds
    finished = {e.data["name"]: e.data for e in evs if e.event == "tool" and e.data["status"] != "running"}
    assert {"orders", "docs"} <= set(finished), finished
    assert all(finished[n]["status"] == "ok" for n in ("orders", "docs"))
    # Every tool event comes before the first token of the answer.
    assert max(i for i, k in enumerate(kinds) if k == "tool") < kinds.index("delta")
    rec = admin_record(stack, resp.headers["x-request-id"], lambda r: r["record"].get("status") == "complete")
    prompt = rec["record"]["prompt"]
    assert "<tool_results>" in prompt and "A100" in prompt and "damaged" in prompt.lower()
    # Results sit after the history and before the new question, marked as data.
    assert prompt.index("<tool_results>") < prompt.rindex(text)
    assert {t["name"] for t in rec["record"]["tools"]} >= {"orders", "docs"}

    # The stored turn keeps its tool steps and the block they put in the prompt, so the next turn
    # still shows the model what the tools returned, in the same place: its prompt extends this
    # one, and the engine reuses the cached blocks past the tool results.
    turn = client.get(f"/v1/conversations/{chat_id}").json()["turns"][-1]
    assert {t["name"] for t in turn["tools"]} >= {"orders", "docs"} and turn["tool_prompt"] in prompt
    evs2, resp2 = chat(client, chat_id, "Thanks! Can you say that again in one sentence?")
    assert evs2[-1].event == "done", [e.event for e in evs2]
    rec2 = admin_record(stack, resp2.headers["x-request-id"], lambda r: r["record"].get("status") == "complete")
    assert rec2["record"]["prompt"].startswith(prompt + turn["answer"])
    # Cached up to the last 16-token block boundary of the first prompt, give or take a block where
    # the answer's first token merges: well past the tool results (hundreds of tokens).
    assert evs2[-1].data["cached_tokens"] >= rec["record"]["usage"]["prompt_tokens"] - 32, evs2[-1].data
