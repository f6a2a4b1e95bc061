"""OpenAI details users hit (issue 30), through the official SDK on the real stack and the real model:
vLLM's `top_k` and `min_p`, log probabilities streamed with their own tokens, `reasoning_tokens`,
parallel tool calls."""

from __future__ import annotations

import json

from openai import OpenAI

from switchyard.cli.stack import Stack

MODEL = "SmolLM2-135M-Instruct"
STORY = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper."}]


def _client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0)


def _answer(stack: Stack, **kw: object) -> str:
    resp = _client(stack).chat.completions.create(model=MODEL, messages=STORY, max_tokens=16, **kw)  # type: ignore[call-overload]
    return str(resp.choices[0].message.content)


def test_top_k_one_and_min_p_one_sample_the_greedy_answer(stack: Stack) -> None:
    greedy = _answer(stack, temperature=0)
    hot = {"temperature": 1.8, "seed": 5}
    assert _answer(stack, **hot) != greedy  # hot sampling leaves the greedy path here
    assert _answer(stack, **hot, extra_body={"top_k": 1}) == greedy
    assert _answer(stack, **hot, extra_body={"min_p": 1.0}) == greedy
    assert _answer(stack, **hot, extra_body={"top_k": -1, "min_p": 0}) == _answer(stack, **hot)


def test_streamed_logprobs_come_with_their_own_text(stack: Stack) -> None:
    chunks = list(
        _client(stack).chat.completions.create(
            model=MODEL, messages=STORY, logprobs=True, top_logprobs=2, max_tokens=24, seed=3, stream=True
        )
    )
    texts = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(texts) >= 3
    for ch in texts:
        lp = ch.choices[0].logprobs
        assert lp is not None and lp.content, ch  # in the same chunk as the text they belong to
        assert "".join(t.token for t in lp.content) == ch.choices[0].delta.content
        assert all(len(t.top_logprobs) == 2 for t in lp.content)
    # None come again after the text: each token has exactly one entry.
    entries = [
        t for ch in chunks if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.content or []
    ]
    assert "".join(t.token for t in entries) == "".join(ch.choices[0].delta.content or "" for ch in texts)


def test_reasoning_tokens_are_counted_in_reasoning_mode_only(stack: Stack) -> None:
    client = _client(stack)
    fast = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=24)
    assert fast.usage is not None and fast.usage.completion_tokens_details is not None
    assert fast.usage.completion_tokens_details.reasoning_tokens == 0
    slow = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=48, reasoning_effort="medium")
    u = slow.usage
    assert u is not None and u.completion_tokens_details is not None
    reasoning = u.completion_tokens_details.reasoning_tokens
    assert reasoning is not None and 0 < reasoning < u.completion_tokens, u
    # Streamed, with include_usage: the same count in the usage chunk.
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=STORY,
            max_tokens=48,
            reasoning_effort="medium",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1].usage
    assert last is not None and last.completion_tokens_details is not None
    assert (last.completion_tokens_details.reasoning_tokens or 0) > 0


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TWO_CITIES = [{"role": "user", "content": "What is the weather in Paris and in Oslo?"}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def _calls(stack: Stack, **kw: object) -> list:
    resp = _client(stack).chat.completions.create(
        model=MODEL,
        messages=TWO_CITIES,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice=FORCED,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )
    c = resp.choices[0]
    assert c.finish_reason == "tool_calls", c
    return list(c.message.tool_calls or [])


def test_parallel_tool_calls_come_back_as_several_calls(stack: Stack) -> None:
    # The small model ends its answer after one call; `ignore_eos` (vLLM's extension) makes it go on, and
    # the grammar then admits only another call on its own line: the real path to several calls.
    forced = {"max_tokens": 64, "extra_body": {"ignore_eos": True}}
    calls = _calls(stack, **forced)
    assert len(calls) >= 2, calls
    assert all(c.function.name == "get_weather" for c in calls)
    cities = [json.loads(c.function.arguments)["city"] for c in calls]
    assert cities[:2] == ["Paris", "Oslo"], cities
    assert len({c.id for c in calls}) == len(calls)
    # Streamed: one tool_calls delta per call, each with its index; the SDK's accumulator joins them.
    stream = _client(stack).chat.completions.stream(
        model=MODEL,
        messages=TWO_CITIES,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice=FORCED,  # type: ignore[arg-type]
        **forced,  # type: ignore[arg-type]
    )
    with stream as s:
        indexes = [
            tc.index for ev in s if ev.type == "chunk" for ch in ev.chunk.choices for tc in ch.delta.tool_calls or []
        ]
        final = s.get_final_completion()
    assert indexes == list(range(len(calls)))
    streamed = final.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in streamed] == [json.loads(c.function.arguments) for c in calls]
    # parallel_tool_calls false: one call, the same way forced.
    (one,) = _calls(stack, parallel_tool_calls=False, **forced)
    assert json.loads(one.function.arguments) == {"city": "Paris"}
