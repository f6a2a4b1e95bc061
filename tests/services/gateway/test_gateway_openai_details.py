"""OpenAI details users hit (issue 30): vLLM's `top_k` and `min_p`, sent by the SDK in `extra_body`,
reach the engine's sampling parameters (out-of-range values are the SDK's BadRequestError);
`parallel_tool_calls` reaches the pipeline and shapes `tool_calls`; streamed chunks carry their own
text's log probabilities; `reasoning_tokens` is counted in usage."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from switchyard.schemas import ChatEvent, TokenLogprob, Usage
from switchyard.services.gateway.chat_completions.encoder import ChunkEncoder, fold_chunks
from switchyard.services.gateway.runs.relay import frames_of
from switchyard.services.inference.phases import params_of
from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("extra", "top_k", "min_p"),
    [
        ({"top_k": 40, "min_p": 0.05}, 40, 0.05),
        ({"top_k": -1}, 0, 0.0),
        ({"top_k": 1, "min_p": 1}, 1, 1.0),
        ({}, 0, 0.0),
    ],
)
async def test_top_k_and_min_p_travel_to_the_engine(
    gw: Gateway, responder: Responder, extra: dict[str, Any], top_k: int, min_p: float
) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    resp = await oa.chat.completions.create(model=MODEL, messages=USER, temperature=0.8, extra_body=extra)  # type: ignore[arg-type]
    rid = resp.id.removeprefix("chatcmpl-")
    s = next(w for w in responder.works if w.rid == rid).sampling
    assert (s.top_k, s.min_p) == (top_k, min_p)
    p = params_of(s)
    assert (p.top_k, p.min_p) == (top_k, min_p)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"top_k": -2}, "top_k"),
        ({"top_k": 10**30}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": "5"}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
    ],
)
async def test_bad_top_k_and_min_p_are_400(
    gw: Gateway, responder: Responder, extra: dict[str, Any], named: str
) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    n = len(responder.works)
    with pytest.raises(openai.BadRequestError) as e:
        await oa.chat.completions.create(model=MODEL, messages=USER, extra_body=extra)  # type: ignore[arg-type]
    assert named in str(e.value)
    assert len(responder.works) == n  # refused before anything ran


async def test_anthropic_top_k_is_served(gw: Gateway, responder: Responder) -> None:
    an = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)
    msg = await an.messages.create(model=MODEL, max_tokens=16, messages=USER, extra_body={"top_k": 5})  # type: ignore[arg-type]
    assert msg.content
    assert responder.works[-1].sampling.top_k == 5
    with pytest.raises(anthropic.BadRequestError, match="top_k"):
        await an.messages.create(model=MODEL, max_tokens=16, messages=USER, extra_body={"top_k": -3})  # type: ignore[arg-type]


WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


@pytest.mark.parametrize(("value", "parallel"), [(None, True), (True, True), (False, False)])
async def test_parallel_tool_calls_travel_to_the_pipeline(
    gw: Gateway, responder: Responder, value: bool | None, parallel: bool
) -> None:
    body: dict[str, Any] = {"model": MODEL, "messages": USER, "tools": [WEATHER], "parallel_tool_calls": value}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth(gw.pro_key))
    assert r.status_code == 200, r.text
    rid = r.json()["id"].removeprefix("chatcmpl-")
    assert next(w for w in responder.works if w.rid == rid).parallel_tool_calls is parallel
    body["parallel_tool_calls"] = "no"
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth(gw.pro_key))
    assert r.status_code == 400 and "parallel_tool_calls" in r.text


CALLS = (
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
)


def _answer(text: str, **done: Any) -> list[ChatEvent]:
    return [
        ChatEvent(rid="r", type="delta", text=text[:20]),
        ChatEvent(rid="r", type="delta", text=text[20:]),
        ChatEvent(rid="r", type="done", finish_reason="stop", usage=Usage(completion_tokens=30), **done),
    ]


def _whole(
    answers: list[list[ChatEvent]], names: set[str] | None = None, max_calls: int | None = None
) -> dict[str, Any]:
    """The non-streaming body: the fold of the chunks the encoder streams for these answers."""
    return fold_chunks(frames_of(ChunkEncoder("r", MODEL, True, len(answers), names, max_calls), answers))


def _chunks(encoder: ChunkEncoder, events: list[ChatEvent]) -> list[ChatCompletionChunk]:
    frames = [*encoder.opening(), *(f for i, e in enumerate(events) for f in encoder.encode(0, i, e))]
    return [ChatCompletionChunk.model_validate(json.loads(f.data)) for f in frames]


@pytest.mark.parametrize(("max_calls", "cities"), [(None, ["Paris", "Oslo"]), (1, ["Paris"])])
def test_several_calls_are_several_tool_calls_streamed_and_whole(max_calls: int | None, cities: list[str]) -> None:
    names = {"get_weather"}
    body = _whole([_answer(CALLS)], names, max_calls)
    choice = ChatCompletion.model_validate(body).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls is not None
    assert [json.loads(c.function.arguments)["city"] for c in choice.message.tool_calls] == cities  # type: ignore[union-attr]
    chunks = _chunks(ChunkEncoder("r", MODEL, False, 1, names, max_calls), _answer(CALLS))
    deltas = [tc for ch in chunks for tc in ch.choices[0].delta.tool_calls or []]
    # One chunk per call, each with its index, as the SDK's stream accumulator expects.
    assert [tc.index for tc in deltas] == list(range(len(cities)))
    assert [json.loads(tc.function.arguments or "")["city"] for tc in deltas] == cities  # type: ignore[union-attr]
    assert len({tc.id for tc in deltas}) == len(cities) and chunks[-1].choices[0].finish_reason == "tool_calls"


def test_streamed_text_chunks_carry_their_own_logprobs_and_not_again() -> None:
    lps = [TokenLogprob(token=t, logprob=-0.5) for t in ("Hel", "lo")]
    events = [
        ChatEvent(rid="r", type="delta", text="Hel", logprobs=lps[:1]),
        ChatEvent(rid="r", type="delta", text="lo", logprobs=lps[1:]),
        ChatEvent(rid="r", type="done", finish_reason="stop", usage=Usage(), logprobs=lps),
    ]
    chunks = _chunks(ChunkEncoder("r", MODEL, False, 1), events)
    with_lps = [ch.choices[0] for ch in chunks if ch.choices[0].logprobs is not None]
    assert [(c.delta.content, [t.token for t in c.logprobs.content or []]) for c in with_lps] == [  # type: ignore[union-attr]
        ("Hel", ["Hel"]),
        ("lo", ["lo"]),
    ]
    # A stream whose text carried none (a redaction came first) gets none at the end either.
    bare = [ChatEvent(rid="r", type="delta", text="Hi"), ChatEvent(rid="r", type="done", finish_reason="stop")]
    assert all(ch.choices[0].logprobs is None for ch in _chunks(ChunkEncoder("r", MODEL, False, 1), bare))


def test_reasoning_tokens_are_in_usage_and_summed_over_answers() -> None:
    answers = [
        [ChatEvent(rid="r", type="done", finish_reason="stop", usage=Usage(completion_tokens=9, reasoning_tokens=4))],
        [ChatEvent(rid="r", type="done", finish_reason="stop", usage=Usage(completion_tokens=7, reasoning_tokens=2))],
    ]
    body = ChatCompletion.model_validate(_whole(answers))
    assert body.usage is not None and body.usage.completion_tokens == 16
    assert body.usage.completion_tokens_details is not None
    assert body.usage.completion_tokens_details.reasoning_tokens == 6
