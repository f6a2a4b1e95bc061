"""Client-defined tools through the OpenAI SDK, and the server-side tools list, on the real stack."""

from __future__ import annotations

import json

import httpx
from openai import OpenAI

from switchyard.cli.stack import Stack

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_forced_tool_call_comes_back_as_tool_calls(stack: Stack) -> None:
    client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0)
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    resp = client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=msgs,
        tools=[WEATHER],
        tool_choice=choice,
        max_tokens=40,  # type: ignore[arg-type]
    )
    c = resp.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert c.message.tool_calls and c.message.tool_calls[0].function.name == "get_weather"
    assert isinstance(json.loads(c.message.tool_calls[0].function.arguments), dict)

    # Streaming: the call arrives as a tool_calls delta, then finish_reason tool_calls.
    chunks = list(
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct",
            messages=msgs,
            tools=[WEATHER],
            tool_choice=choice,
            max_tokens=40,
            stream=True,  # type: ignore[arg-type]
        )
    )
    calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert calls and calls[0].function and calls[0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # The client runs the tool and sends the result back; the model answers in prose.
    follow = [
        *msgs,
        {"role": "assistant", "content": None, "tool_calls": [c.message.tool_calls[0].model_dump()]},
        {"role": "tool", "tool_call_id": c.message.tool_calls[0].id, "content": '{"temp_c": 18, "sky": "clear"}'},
    ]
    answer = client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=follow,
        tools=[WEATHER],  # type: ignore[arg-type]
        tool_choice="none",
        max_tokens=40,
    )
    assert answer.choices[0].message.content and answer.choices[0].finish_reason in ("stop", "length")


def test_server_side_tools_are_listed(stack: Stack) -> None:
    r = httpx.get(f"{stack.url}/v1/tools", headers={"Authorization": f"Bearer {stack.api_key}"})
    assert r.status_code == 200
    names = {t["function"]["name"] for t in r.json()["data"]}
    assert {"orders", "docs", "web"} <= names
