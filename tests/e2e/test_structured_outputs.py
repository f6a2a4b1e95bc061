"""Structured outputs through the OpenAI SDK on the real stack and the real model (issue 22): the
answer is decoded under a grammar, so even the small model's JSON loads and validates."""

from __future__ import annotations

import json
import math
from typing import Literal

import anthropic
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, ConfigDict

from switchyard.cli.stack import Stack

MODEL = "SmolLM2-135M-Instruct"


class Forecast(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: Literal["Paris", "Oslo", "Lima"]
    days: int
    rain: bool


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def _client(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0)


def _valid_weather_args(arguments: str) -> None:
    args = json.loads(arguments)
    assert set(args) == {"city", "unit"} and isinstance(args["city"], str) and len(args["city"]) <= 20, args
    assert args["unit"] in ("c", "f")


def test_a_json_schema_answer_loads_and_validates(stack: Stack) -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "forecast", "schema": Forecast.model_json_schema(), "strict": True},
    }
    msgs = [{"role": "user", "content": "Weather in Oslo for the next 3 days, as JSON."}]
    resp = _client(stack).chat.completions.create(
        model=MODEL,
        messages=msgs,  # type: ignore[arg-type]
        response_format=fmt,  # type: ignore[arg-type]
        max_tokens=60,
    )
    c = resp.choices[0]
    assert c.finish_reason == "stop", c
    Forecast.model_validate(json.loads(c.message.content or ""))
    # Streaming: the deltas join into the same kind of document.
    chunks = _client(stack).chat.completions.create(
        model=MODEL,
        messages=msgs,  # type: ignore[arg-type]
        response_format={"type": "json_object"},
        max_tokens=80,
        stream=True,
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.startswith("{"), text


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_validate_against_the_schema(stack: Stack, tool_choice: object) -> None:
    resp = _client(stack).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Lima?"}],
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice=tool_choice,  # type: ignore[arg-type]
        max_tokens=80,
    )
    c = resp.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = (c.message.tool_calls or [None])[0]
    assert call is not None and call.function.name in ("get_weather", "get_time")
    if call.function.name == "get_weather":
        _valid_weather_args(call.function.arguments)
    else:
        assert json.loads(call.function.arguments) == {}


def test_auto_tool_calls_are_well_formed_when_the_model_makes_one(stack: Stack) -> None:
    resp = _client(stack).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Call get_weather for Paris in celsius."}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="auto",
        max_tokens=80,
    )
    c = resp.choices[0]
    if c.finish_reason == "tool_calls":
        _valid_weather_args((c.message.tool_calls or [])[0].function.arguments)
    else:  # the model chose prose: no half-written call may be left in it
        assert "<tool_call>" not in (c.message.content or "")


def test_an_unsupported_parameter_is_refused_by_name(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError, match="'audio'"):
        _client(stack).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            audio={"voice": "alloy", "format": "wav"},
        )


def test_n_gives_three_choices(stack: Stack) -> None:
    resp = _client(stack).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a colour."}],
        n=3,
        temperature=1.0,
        max_tokens=8,
    )
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert all(c.message.content for c in resp.choices)
    assert resp.usage is not None and resp.usage.completion_tokens >= 3


def _check_logprobs(content: list, text: str, top: int) -> None:
    assert content and "".join(t.token for t in content) == text
    for t in content:
        values = [a.logprob for a in t.top_logprobs]
        assert len(values) == top and values == sorted(values, reverse=True)
        assert t.logprob <= 0.0 and sum(math.exp(v) for v in values) <= 1.0 + 1e-4
        assert bytes(t.bytes).decode("utf-8", errors="replace") == t.token


def test_logprobs_sum_sensibly_streaming_and_not(stack: Stack) -> None:
    msgs = [{"role": "user", "content": "Name a colour."}]
    resp = _client(stack).chat.completions.create(
        model=MODEL, messages=msgs, logprobs=True, top_logprobs=3, max_tokens=12, seed=3
    )
    c = resp.choices[0]
    assert c.logprobs is not None and c.logprobs.content is not None
    _check_logprobs(c.logprobs.content, c.message.content or "", 3)
    chunks = list(
        _client(stack).chat.completions.create(
            model=MODEL, messages=msgs, logprobs=True, top_logprobs=2, max_tokens=12, seed=3, stream=True
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    content = [
        t for ch in chunks if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.content or []
    ]
    _check_logprobs(content, text, 2)


@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_anthropic_forced_tool_use_validates(stack: Stack, tool_choice: dict[str, str]) -> None:
    client = anthropic.Anthropic(base_url=stack.url, api_key=stack.api_key, max_retries=0)
    tools = [
        {"name": WEATHER["function"]["name"], "input_schema": WEATHER["function"]["parameters"]},  # type: ignore[index]
        {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
    ]
    msgs = [{"role": "user", "content": "What is the weather in Lima?"}]
    msg = client.messages.create(model=MODEL, max_tokens=80, messages=msgs, tools=tools, tool_choice=tool_choice)  # type: ignore[arg-type]
    assert msg.stop_reason == "tool_use", msg
    use = next(b for b in msg.content if b.type == "tool_use")
    if use.name == "get_weather":
        _valid_weather_args(json.dumps(use.input))
    with client.messages.stream(model=MODEL, max_tokens=80, messages=msgs, tools=tools, tool_choice=tool_choice) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and any(b.type == "tool_use" for b in final.content)
