"""Anthropic and OpenAI details through the official SDKs on the real stack and the real model: an
assistant prefill (Anthropic's final assistant message, vLLM's `continue_final_message`) is continued, not
repeated, from a prompt that ends inside it; `message_start` carries the real prompt token count; chat
completions name the engine build in `system_fingerprint`."""

from __future__ import annotations

import anthropic
from openai import OpenAI

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France? Answer in one sentence."
PREFILL = "The capital of France is"


def _anthropic(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key=stack.api_key, max_retries=0)


def _openai(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0)


def _prompt(stack: Stack, rid: str) -> str:
    record = admin_record(stack, rid, lambda r: "prompt" in r["record"])["record"]
    return str(record["prompt"])


def test_anthropic_prefill_is_the_models_continuation(stack: Stack) -> None:
    raw = _anthropic(stack).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=12,  # greedy: the gateway's default temperature is 0
        messages=[{"role": "user", "content": QUESTION}, {"role": "assistant", "content": PREFILL}],
    )
    msg = raw.parse()
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert text.strip() and not text.startswith(PREFILL)
    prompt = _prompt(stack, raw.headers["x-request-id"])
    assert prompt.endswith(f"{QUESTION}<|im_end|>\n<|im_start|>assistant\n{PREFILL}")  # left open
    # Not the answer the same question gets without a prefill: the model went on from the prefill.
    plain = _anthropic(stack).messages.create(
        model=MODEL, max_tokens=12, messages=[{"role": "user", "content": QUESTION}]
    )
    assert "".join(b.text for b in plain.content if b.type == "text") != text


def test_message_start_carries_the_real_prompt_token_count(stack: Stack) -> None:
    with _anthropic(stack).messages.stream(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": QUESTION}]
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = next(e for e in events if e.type == "message_start")
    counted = start.message.usage.input_tokens
    assert counted > 10
    # The engine's own count at the end (cache reads apart, as Anthropic counts them) is the same prompt.
    assert counted == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)


def test_continue_final_message_and_the_fingerprint(stack: Stack) -> None:
    client = _openai(stack)
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": PREFILL}]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    resp = raw.parse()
    text = resp.choices[0].message.content or ""
    assert text.strip() and not text.startswith(PREFILL)
    assert _prompt(stack, raw.headers["x-request-id"]).endswith(f"<|im_start|>assistant\n{PREFILL}")
    # The same through Anthropic's API: one prompt, one greedy answer.
    same = _anthropic(stack).messages.create(
        model=MODEL,
        max_tokens=12,  # greedy: the gateway's default temperature is 0
        messages=[{"role": "user", "content": QUESTION}, {"role": "assistant", "content": PREFILL}],
    )
    assert "".join(b.text for b in same.content if b.type == "text") == text
    # The engine build: the native engine, this package's version, the model file's digest; every chunk too.
    fingerprint = resp.system_fingerprint
    assert fingerprint is not None and fingerprint.startswith("native-")
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages[:1],  # type: ignore[arg-type]
            max_tokens=8,
            stream=True,
        )
    )
    assert {c.system_fingerprint for c in chunks} == {fingerprint}


def test_add_generation_prompt_false_ends_the_prompt_after_the_user(stack: Stack) -> None:
    raw = _openai(stack).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=4,
        extra_body={"add_generation_prompt": False},
    )
    assert raw.parse().choices[0].finish_reason in ("stop", "length")
    assert _prompt(stack, raw.headers["x-request-id"]).endswith(f"{QUESTION}<|im_end|>\n")
