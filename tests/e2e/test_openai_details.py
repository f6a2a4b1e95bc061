"""OpenAI details users hit (issue 30), through the official SDK on the real stack and the real model:
vLLM's `top_k` and `min_p`, log probabilities streamed with their own tokens, `reasoning_tokens`."""

from __future__ import annotations

from openai import OpenAI

from cli.stack import Stack

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
