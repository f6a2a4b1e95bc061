"""A model that thinks natively, through the whole pipeline: its card says how it thinks, its text is split
at `<think>`/`</think>` as it streams, and the thinking reaches each protocol in that protocol's field
(`reasoning_content` on Chat Completions, thinking blocks on Anthropic Messages), within the client's
max_tokens and the thinking budget it asked for, and never into a later prompt.

No real thinking model is available offline, and a random-weight checkpoint would not write the delimiters:
the thinking model here is the simulated engine serving a card with `thinking` set (switchyard/libs/engine/sim.py
writes `<think>`, a few sentences' tokens and `</think>` before its answer, as such a model does). It runs as
its own pool beside the session's SmolLM2, added to the registry at run time and removed afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from switchyard.cli.stack import Stack
from switchyard.libs.models import ModelCard
from switchyard.libs.tokenizer.paths import default_model_path
from switchyard.schemas import ThinkingSpec
from tests.e2e.conftest import admin_record, chat

pytestmark = pytest.mark.e2e

THINKER = ModelCard(name="thinker", aliases=["thinker-sim"], pool="thinker", engine="sim", thinking=ThinkingSpec())
# The sim's thinking is this many tokens; budgets below it are cut short.
SIM_THINK_TOKENS = 24


@pytest.fixture(scope="module")
def thinker(stack: Stack) -> Iterator[str]:
    """Added at run time (`POST /v1/admin/models`): the stack's supervisor starts its pool, and every gateway,
    context and router sees its entry in the registry at once; removed again afterwards."""
    card = THINKER.model_copy(update={"path": default_model_path()})  # the sim keeps the bundled tokenizer
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    with httpx.Client(base_url=stack.url, headers=admin, timeout=300) as c:
        r = c.post("/v1/admin/models", json=card.model_dump(mode="json"))
        assert r.status_code == 201, r.text
        try:
            yield THINKER.name
        finally:
            assert c.delete(f"/v1/admin/models/{THINKER.name}").status_code == 200


@pytest.fixture(scope="module")
def oai(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0, timeout=120)


QUESTION = [{"role": "user", "content": "What is two plus two?"}]


def test_chat_completions_stream_the_thinking_as_reasoning_content(oai: openai.OpenAI, thinker: str) -> None:
    stream = oai.chat.completions.create(
        model=thinker, messages=QUESTION, max_tokens=60, stream=True, stream_options={"include_usage": True}
    )
    reasoning, content, order, usage = "", "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        piece = (delta.model_extra or {}).get("reasoning_content")
        if piece:
            reasoning += piece
            order.append("reasoning")
        if delta.content:
            content += delta.content
            order.append("content")
    assert reasoning.strip() and content.strip(), (reasoning, content)
    assert order == sorted(order, key=lambda k: k == "content"), order  # all the thinking comes first
    for tag in ("<think>", "</think>"):
        assert tag not in reasoning and tag not in content
    # The client's max_tokens bounds the whole answer, thinking included.
    assert usage is not None and usage.completion_tokens <= 60
    details = usage.completion_tokens_details
    assert details is not None and (details.reasoning_tokens or 0) >= SIM_THINK_TOKENS // 2


def test_chat_completions_whole_answer_and_reasoning_effort_none(oai: openai.OpenAI, thinker: str) -> None:
    done = oai.chat.completions.create(model=thinker, messages=QUESTION, max_tokens=60)
    message = done.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content") and message.content
    off = oai.chat.completions.create(model=thinker, messages=QUESTION, max_tokens=20, reasoning_effort="none")
    assert not (off.choices[0].message.model_extra or {}).get("reasoning_content") and off.choices[0].message.content
    assert off.usage is not None and off.usage.completion_tokens_details is not None
    assert off.usage.completion_tokens_details.reasoning_tokens == 0


def test_anthropic_messages_give_a_thinking_block_cut_at_its_budget(stack: Stack, thinker: str) -> None:
    client = anthropic.Anthropic(base_url=stack.url, api_key=stack.api_key, max_retries=0)
    message = client.messages.create(
        model=thinker,
        max_tokens=40,
        thinking={"type": "enabled", "budget_tokens": 6},
        messages=[{"role": "user", "content": "What is two plus two?"}],
    )
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text"], message.content
    thinking, text = message.content[0], message.content[1]
    assert thinking.type == "thinking" and text.type == "text"
    assert thinking.thinking.strip() and text.text.strip() and "</think>" not in text.text
    # Six tokens of a 24-token thinking: the budget closed it, and the model answered after it.
    assert len(thinking.thinking.split()) < SIM_THINK_TOKENS // 2, thinking.thinking
    assert message.usage.output_tokens <= 40
    # Streamed: thinking_delta events in a thinking block, then text_delta events.
    with client.messages.stream(
        model=thinker,
        max_tokens=40,
        thinking={"type": "enabled", "budget_tokens": 30},
        messages=[{"role": "user", "content": "What is two plus two?"}],
    ) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
    assert "thinking_delta" in deltas and "text_delta" in deltas
    assert deltas == sorted(deltas, key=lambda k: k == "text_delta")


def test_the_thinking_is_never_saved_into_a_later_prompt(client: httpx.Client, stack: Stack, thinker: str) -> None:
    first, resp = chat(client, "thinking-chat", "What is two plus two?", model=thinker, max_tokens=40)
    assert resp.status_code == 200, resp.text
    thought = "".join(e.data["text"] for e in first if e.event == "thinking")
    answer = "".join(e.data["text"] for e in first if e.event == "delta")
    assert thought.strip() and answer.strip()
    second, resp = chat(client, "thinking-chat", "And three plus three?", model=thinker, max_tokens=40)
    assert resp.status_code == 200, resp.text
    rid = next(e.data["rid"] for e in second if e.event == "done")
    record = admin_record(stack, rid, lambda r: bool(r["record"].get("prompt")))["record"]
    assert answer.strip()[:40] in record["prompt"] and thought.strip()[:40] not in record["prompt"]
    # The plan the gateway made is the one every stage read: the model's own thinking, within max_tokens.
    plan = record["stages"]["context"]["decision"]["plan"]
    assert (plan["model"], plan["thinking"], plan["max_tokens"]) == ("thinker", "native", 40), plan


def test_responses_give_a_reasoning_item_before_the_message(oai: openai.OpenAI, thinker: str) -> None:
    response = oai.responses.create(model=thinker, input="What is two plus two?", max_output_tokens=40, store=False)
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"], kinds
    reasoning = response.output[0].model_dump()
    text = "".join(part["text"] for part in reasoning.get("content") or [])
    assert text.strip() and "<think>" not in text and response.output_text.strip()
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens > 0
    assert response.usage.output_tokens <= 40
