"""No silent drops (issue 22): every request parameter is served, listed as accepted-and-ignored in
docs/product.md's one table, or refused with a 400 that names it, in the API's own error shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from switchyard.services.gateway.chat_completions.request import (
    CompletionRequest,
    ContentPart,
    OpenAIMessage,
    StreamOptions,
)
from switchyard.services.gateway.embeddings.api import EmbeddingsRequest
from switchyard.services.gateway.messages.request import AnthropicMessage, Block, MessagesRequest
from switchyard.services.gateway.messages.tools import AnthropicTool, AnthropicToolChoice
from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.response_format import JsonSchemaFormat, ResponseFormatIn, StructuredOutputs
from switchyard.services.gateway.tokens.api import CountTokensRequest, DetokenizeRequest, TokenizeRequest
from switchyard.services.gateway.tool_calls import FunctionDef, NamedChoice, ToolDef
from switchyard.services.inference.phases import params_of
from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]
PRODUCT = Path(__file__).resolve().parents[3] / "docs" / "product.md"


def openai_body(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, **kw}


def anthropic_body(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "messages": USER, **kw}


@pytest.mark.parametrize(
    ("route", "body", "named"),
    [
        ("/v1/chat/completions", openai_body(audio={"voice": "alloy", "format": "wav"}), "'audio'"),
        ("/v1/chat/completions", openai_body(modalities=["text", "audio"]), "'modalities'"),
        ("/v1/chat/completions", openai_body(functions=[{"name": "f"}]), "'functions'"),
        ("/v1/chat/completions", openai_body(prediction={"type": "content", "content": "x"}), "'prediction'"),
        (
            "/v1/chat/completions",
            openai_body(web_search_options={"search_context_size": "low"}),
            "'web_search_options'",
        ),
        ("/v1/chat/completions", openai_body(temprature=0.5), "'temprature'"),  # a typo is not a default
        (
            "/v1/chat/completions",
            openai_body(messages=[{"role": "user", "content": "hi", "function_call": {"name": "f"}}]),
            "'messages[0].function_call'",
        ),
        (
            "/v1/chat/completions",
            openai_body(stream=True, stream_options={"chunk_size": 4}),
            "'stream_options.chunk_size'",
        ),
        ("/v1/messages", anthropic_body(mcp_servers=[{"type": "url", "url": "http://x"}]), "'mcp_servers'"),
        ("/v1/messages", anthropic_body(container="c1"), "'container'"),
        (
            "/v1/messages",
            anthropic_body(messages=[{"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}]),
            "'messages[0].content[0].colour'",
        ),
    ],
)
async def test_an_unsupported_parameter_is_400_naming_it(
    gw: Gateway, responder: Responder, route: str, body: dict[str, Any], named: str
) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(route, json=body, headers=gw.auth(gw.pro_key))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "bad_request"
    assert named in err["message"], err
    if route == "/v1/messages":
        assert r.json()["type"] == "error"
    assert len(responder.works) == n  # refused before anything is published


@pytest.mark.parametrize(
    ("route", "body"),
    [
        # Accepted and ignored, as the table says.
        (
            "/v1/chat/completions",
            openai_body(user="u-1", metadata={"k": "v"}, store=True, parallel_tool_calls=False, service_tier="auto"),
        ),
        ("/v1/chat/completions", openai_body(prompt_cache_key="k", safety_identifier="s")),
        ("/v1/chat/completions", openai_body(messages=[{"role": "user", "content": "hi", "name": "ann"}])),
        (
            "/v1/chat/completions",
            openai_body(stream=True, stream_options={"include_usage": True, "include_obfuscation": False}),
        ),
        ("/v1/messages", anthropic_body(metadata={"user_id": "u-1"}, service_tier="auto")),
        (
            "/v1/messages",
            anthropic_body(
                system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
                    }
                ],
            ),
        ),
        # An unknown key holding its default (null, 0, false, empty) asks for nothing: taken.
        ("/v1/chat/completions", openai_body(audio=None, modalities=[], functions=None, prediction=None)),
        (
            "/v1/chat/completions",
            openai_body(
                messages=[
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo", "refusal": None, "audio": None, "function_call": None},
                    {"role": "user", "content": "again"},
                ]
            ),
        ),
    ],
)
async def test_ignored_and_default_valued_parameters_are_taken(
    gw: Gateway, responder: Responder, route: str, body: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(route, json=body, headers=gw.auth(gw.pro_key))
    assert r.status_code == 200, r.text


async def test_the_sdks_raise_their_bad_request_error_naming_the_parameter(gw: Gateway) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="'audio'"):
        await oa.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], audio={"voice": "alloy", "format": "wav"}
        )
    an = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="'container'"):
        await an.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"container": "c1"}
        )


def _documented_ignored() -> set[str]:
    """Parameter names in docs/product.md's accepted-and-ignored table (first column, backticked)."""
    text = PRODUCT.read_text()
    section = text.split("## Request parameters", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    ignored = [r for r in rows if "ignored" in r.split("|")[2]]
    return {name for r in ignored for name in re.findall(r"`([^`]+)`", r.split("|")[1])}


@pytest.mark.parametrize(
    "model",
    [
        CompletionRequest,
        OpenAIMessage,
        ContentPart,
        StreamOptions,
        JsonSchemaFormat,
        ResponseFormatIn,
        StructuredOutputs,
        ToolDef,
        FunctionDef,
        NamedChoice,
        MessagesRequest,
        AnthropicMessage,
        Block,
        AnthropicTool,
        AnthropicToolChoice,
        EmbeddingsRequest,
        TokenizeRequest,
        DetokenizeRequest,
        CountTokensRequest,
    ],
)
def test_every_ignored_parameter_is_in_the_one_table(model: type[Strict]) -> None:
    documented = _documented_ignored()
    missing = {k for k in model.IGNORED if k not in documented}
    assert not missing, f"{model.__name__}: {missing} ignored but not listed in docs/product.md"


async def test_penalties_and_logit_bias_travel_to_the_engine(gw: Gateway, responder: Responder) -> None:
    body = openai_body(frequency_penalty=0.5, presence_penalty=-0.25, repetition_penalty=1.1, logit_bias={"17": -100})
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth(gw.pro_key))
    assert r.status_code == 200, r.text
    rid = r.json()["id"].removeprefix("chatcmpl-")
    s = next(w for w in responder.works if w.rid == rid).sampling
    assert (s.frequency_penalty, s.presence_penalty, s.repetition_penalty, s.logit_bias) == (
        0.5,
        -0.25,
        1.1,
        {17: -100},
    )
    p = params_of(s)
    assert (p.frequency_penalty, p.presence_penalty, p.repetition_penalty, p.logit_bias) == (
        0.5,
        -0.25,
        1.1,
        {17: -100},
    )


@pytest.mark.parametrize(
    "bad",
    [{"frequency_penalty": 2.5}, {"presence_penalty": -3}, {"repetition_penalty": 0}, {"logit_bias": {"17": 101}}],
)
async def test_out_of_range_penalties_are_400(gw: Gateway, bad: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai_body(**bad), headers=gw.auth(gw.pro_key))
    assert r.status_code == 400 and next(iter(bad)) in r.json()["error"]["message"], r.text


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, {"type": "json_object"}),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "a", "schema": SCHEMA, "strict": True},
                }
            },
            {"type": "json_schema", "json_schema": SCHEMA},
        ),
        ({"structured_outputs": {"regex": "[0-9]+"}}, {"type": "regex", "regex": "[0-9]+"}),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, {"type": "choice", "choices": ["yes", "no"]}),
        ({"structured_outputs": {"json": SCHEMA}}, {"type": "json_schema", "json_schema": SCHEMA}),
    ],
)
async def test_response_formats_travel_to_the_engine(
    gw: Gateway, responder: Responder, extra: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai_body(**extra), headers=gw.auth(gw.pro_key))
    assert r.status_code == 200, r.text
    rid = r.json()["id"].removeprefix("chatcmpl-")
    fmt = next(w for w in responder.works if w.rid == rid).sampling.response_format
    got = None if fmt is None else fmt.model_dump(exclude_defaults=True)
    assert got == expected


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_schema"}},
        {"response_format": {"type": "yaml"}},
        {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
        {"structured_outputs": {"regex": "a", "choice": ["a"]}},
        {"structured_outputs": {"grammar": "root ::= 'a'"}},
        {"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}},
    ],
)
async def test_bad_response_formats_are_400(gw: Gateway, responder: Responder, extra: dict[str, Any]) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai_body(**extra), headers=gw.auth(gw.pro_key))
    assert r.status_code == 400, r.text
    assert len(responder.works) == n


async def test_n_answers_are_n_requests_with_consecutive_seeds(gw: Gateway, responder: Responder) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    resp = await oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=3, seed=40)
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert all(c.message.content == "Hello" and c.finish_reason == "stop" for c in resp.choices)
    rid = resp.id.removeprefix("chatcmpl-")
    works = {w.rid: w for w in responder.works}
    seeds = [works[r].sampling.seed for r in (rid, f"{rid}-1", f"{rid}-2")]
    assert seeds == [40, 41, 42]
    assert resp.usage is not None and resp.usage.prompt_tokens == 42 and resp.usage.completion_tokens == 9


@pytest.mark.parametrize(
    ("extra", "asked"), [({"logprobs": True}, 0), ({"logprobs": True, "top_logprobs": 5}, 5), ({}, None)]
)
async def test_logprobs_travel_to_the_engine(
    gw: Gateway, responder: Responder, extra: dict[str, Any], asked: int | None
) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai_body(**extra), headers=gw.auth(gw.pro_key))
    assert r.status_code == 200, r.text
    rid = r.json()["id"].removeprefix("chatcmpl-")
    assert next(w for w in responder.works if w.rid == rid).sampling.logprobs == asked
    assert r.json()["choices"][0]["logprobs"] is None  # the scripted pipeline sends none back


@pytest.mark.parametrize("extra", [{"top_logprobs": 3}, {"logprobs": True, "top_logprobs": 21}])
async def test_bad_logprobs_are_400(gw: Gateway, extra: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=openai_body(**extra), headers=gw.auth(gw.pro_key))
    assert r.status_code == 400 and "top_logprobs" in r.json()["error"]["message"], r.text


WEATHER_A = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ({"type": "auto"}, None),
        ({"type": "any"}, "required"),
        ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}, "function:get_weather"),
        ({"type": "none"}, "none"),
    ],
)
async def test_anthropic_tools_travel_like_openai_functions(
    gw: Gateway, responder: Responder, choice: dict[str, Any] | None, expected: str | None
) -> None:
    an = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)
    history = [
        {"role": "user", "content": "weather in Oslo?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C, clear"}]},
    ]
    extra = {} if choice is None else {"tool_choice": choice}
    msg = await an.messages.create(model=MODEL, max_tokens=16, messages=history, tools=[WEATHER_A], **extra)  # type: ignore[arg-type]
    # The scripted pipeline answers in prose: a text block, no call.
    assert [b.type for b in msg.content] == ["thinking", "text"] and msg.stop_reason == "end_turn"
    work = next(w for w in responder.works if w.rid == msg.id.removeprefix("msg_"))
    assert work.tool_choice == expected
    assert work.client_tools == [{"name": "get_weather", "description": "", "parameters": WEATHER_A["input_schema"]}]
    assert work.text == "Result of the function call: 18 C, clear"
    assert work.messages[1].content == '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    async with an.messages.stream(model=MODEL, max_tokens=16, messages=history, tools=[WEATHER_A], **extra) as stream:  # type: ignore[arg-type]
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"] and final.content[1].text == "Hello"  # type: ignore[union-attr]


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "nope"}, {"type": "sometimes"}])
async def test_bad_anthropic_tool_choices_are_400(gw: Gateway, choice: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/v1/messages", json=anthropic_body(tools=[WEATHER_A], tool_choice=choice), headers=gw.auth(gw.pro_key)
        )
    assert r.status_code == 400 and r.json()["type"] == "error", r.text


async def test_n_answers_stream_interleaved_by_index(gw: Gateway) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    stream = await oa.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        n=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    texts = {
        i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in range(3)
    }
    assert texts == {0: "Hello", 1: "Hello", 2: "Hello"}
    finishes = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert finishes == [0, 1, 2]
    assert (
        chunks[-1].usage is not None
        and chunks[-1].usage.completion_tokens == 9
        and chunks[-1].usage.prompt_tokens == 42
    )
