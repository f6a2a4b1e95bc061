"""`POST /v1/responses` through the official OpenAI SDK against a gateway on the scripted pipeline: the
typed event sequence, the body as the fold of the same events (checked against the SDK's own types),
function calls, the ends a response can have, and the refusals."""

from __future__ import annotations

import httpx
import openai
import pytest
from anthropic.types import Message as AnthropicMessage
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.responses.request import (
    CompactRequest,
    FunctionChoice,
    FunctionTool,
    InputItem,
    InputPart,
    ReasoningConfig,
    ResponsesRequest,
    TextConfig,
    TextFormat,
)
from tests.services.gateway.harness import Gateway, Responder
from tests.services.gateway.responses.open_spec import OpenEvent
from tests.services.gateway.sse_client import parse
from tests.services.gateway.test_gateway_params import _documented_ignored

MODEL = "SmolLM2-135M-Instruct"
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
OPEN_EVENT = TypeAdapter(OpenEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _client(gw: Gateway, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=key or gw.pro_key, max_retries=0)


async def _raw_stream(gw: Gateway, **body: object) -> list[dict[str, object]]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/responses", json={"model": MODEL, "stream": True, **body}, headers=gw.auth())
    assert r.status_code == 200, r.text
    *events, done = parse(r.text)
    assert done.data == "[DONE]" and done.event is None  # Open Responses ends the stream with the literal
    for e in events:
        assert e.event == e.data["type"]  # the SSE event name is the event's type
        EVENTS.validate_python(e.data)  # every event is one the SDK knows, with every field it expects
        OPEN_EVENT.validate_python(e.data)  # and its response snapshots have every field the spec requires
    return [e.data for e in events]


async def test_non_streaming_body_is_the_sdk_response(gw: Gateway, responder: Responder) -> None:
    client = _client(gw)
    resp = await client.responses.create(
        model=MODEL,
        instructions="be brief",
        input=[
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        ],
        temperature=0.2,
        max_output_tokens=20,
        store=False,
    )
    Response.model_validate(resp.model_dump())
    assert resp.status == "completed" and resp.output_text == "Hello"
    # The server-side tool, the reasoning and the message are each their own output item, in order.
    assert [i.type for i in resp.output] == ["mcp_call", "reasoning", "message"]
    tool = resp.output[0]
    assert tool.type == "mcp_call" and tool.name == "orders.lookup" and tool.output == "shipped"
    reasoning = resp.output[1]
    assert reasoning.type == "reasoning" and reasoning.content and reasoning.content[0].text == "thinking..."
    assert resp.usage is not None and resp.usage.input_tokens == 42 and resp.usage.output_tokens == 3
    assert resp.usage.input_tokens_details.cached_tokens == 16 and resp.usage.total_tokens == 45
    assert resp.instructions == "be brief" and resp.temperature == 0.2 and resp.max_output_tokens == 20
    work = next(w for w in responder.works if w.rid == resp.id.removeprefix("resp_"))
    assert work.system == "be brief" and work.text == "hello" and work.chat_id is None and not work.persist
    assert [(m.role, m.content) for m in work.messages] == [("user", "earlier"), ("assistant", "ok")]
    assert work.sampling.max_tokens == 20 and work.sampling.temperature == 0.2


async def test_stream_is_the_full_typed_sequence_and_folds_to_the_body(gw: Gateway) -> None:
    events = await _raw_stream(gw, input="hello", store=False)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kind in kinds, kind
    deltas = "".join(str(e["delta"]) for e in events if e["type"] == "response.output_text.delta")
    final = Response.model_validate(events[-1]["response"])
    assert deltas == final.output_text == "Hello"
    # Every item added is done, at the index it was added at.
    added = {e["output_index"]: e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}  # type: ignore[index]
    done = {e["output_index"]: e["item"]["id"] for e in events if e["type"] == "response.output_item.done"}  # type: ignore[index]
    assert added == done and [i.id for i in final.output] == [added[i] for i in sorted(added)]


async def test_sdk_stream_helper_reads_our_stream(gw: Gateway) -> None:
    client = _client(gw)
    async with client.responses.stream(model=MODEL, input="hello", store=False) as stream:
        texts = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(texts) == "Hello" and final.output_text == "Hello" and final.status == "completed"


async def test_function_call_item_streamed_and_not(gw: Gateway, responder: Responder) -> None:
    client = _client(gw)
    resp = await client.responses.create(
        model=MODEL, input="call the weather tool", tools=[WEATHER], tool_choice="required", store=False
    )  # type: ignore[list-item]
    calls = [i for i in resp.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].arguments == '{"city": "Paris"}'
    assert resp.output_text == ""
    work = next(w for w in responder.works if w.rid == resp.id.removeprefix("resp_"))
    assert work.tool_choice == "required" and work.client_tools[0]["name"] == "get_weather"
    assert work.parallel_tool_calls and resp.parallel_tool_calls  # OpenAI's default

    events = await _raw_stream(
        gw,
        input="call it",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        store=False,
    )
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert "response.output_text.delta" not in kinds  # the call's text is never shown as text
    final = Response.model_validate(events[-1]["response"])
    assert final.output[0].type == "function_call" and final.tool_choice.type == "function"  # type: ignore[union-attr]
    assert final.parallel_tool_calls is False
    assert not next(w for w in responder.works if w.rid == final.id.removeprefix("resp_")).parallel_tool_calls

    # The client runs it and sends the output back (here with the call echoed, as stateless clients do).
    back = await client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "call the weather tool"},
            calls[0].model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp_c": 18}'},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
        store=False,
    )
    work = next(w for w in responder.works if w.rid == back.id.removeprefix("resp_"))
    assert work.text == 'Result of the function call: {"temp_c": 18}'
    assert work.messages[-1].role == "assistant" and "<tool_call>" in work.messages[-1].content


async def test_max_tokens_is_incomplete_and_a_late_error_is_failed(gw: Gateway) -> None:
    client = _client(gw)
    resp = await client.responses.create(model=MODEL, input="cut short", store=False)
    assert resp.status == "incomplete" and resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens" and resp.output_text == "Hel"

    events = await _raw_stream(gw, input="midfail please", store=False)
    assert events[-1]["type"] == "response.failed"
    failed = Response.model_validate(events[-1]["response"])
    assert failed.status == "failed" and failed.error is not None and "output check" in failed.error.message
    assert failed.output[0].status == "incomplete"  # type: ignore[union-attr]


async def test_refusals_in_the_one_error_shape(gw: Gateway) -> None:
    client = _client(gw)
    with pytest.raises(openai.BadRequestError, match="blocked by policy"):  # refused before the first event
        await client.responses.create(model=MODEL, input="fail now", store=False, stream=True)
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="nope", input="hi")
    async with httpx.AsyncClient(base_url=gw.url) as c:
        bad = [
            {"model": MODEL, "input": "hi", "top_logprobs": 3},  # not served: named
            {"model": MODEL, "input": [{"role": "assistant", "content": "only me"}]},
            {"model": MODEL, "input": "hi", "previous_response_id": "resp_../x"},
            {"model": MODEL, "input": "hi", "background": True, "store": False},
            {"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
            {"model": MODEL, "input": "hi", "tool_choice": {"type": "function", "name": "nope"}},
            {"model": MODEL, "input": "hi", "metadata": {"k": "v" * 513}},
        ]
        for body in bad:
            r = await c.post("/v1/responses", json=body, headers=gw.auth())
            assert r.status_code == 400, (body, r.text)
            assert set(r.json()["error"]) == {"type", "code", "message"}
        assert (
            "top_logprobs" in (await c.post("/v1/responses", json=bad[0], headers=gw.auth())).json()["error"]["message"]
        )
        r = await c.get("/v1/responses/not-an-id", headers=gw.auth())
        assert r.status_code == 400


@pytest.mark.parametrize(
    "model",
    [
        ResponsesRequest,
        InputItem,
        InputPart,
        FunctionTool,
        FunctionChoice,
        TextFormat,
        TextConfig,
        ReasoningConfig,
        CompactRequest,
    ],
)
def test_every_ignored_parameter_is_in_the_one_table(model: type[Strict]) -> None:
    documented = _documented_ignored()
    missing = {k for k in model.IGNORED if k not in documented}
    assert not missing, f"{model.__name__}: {missing} ignored but not listed in docs/product.md"


async def test_every_protocols_whole_body_is_the_fold_of_its_stream(gw: Gateway) -> None:
    """Chat Completions and Messages bodies are folds of their own frames too: each validates against the
    SDK's type and says what the stream said, for a plain answer and a function call."""
    tools = [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        for text, extra in (("hello", {}), ("call it", {"tools": tools})):
            body = {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}
            whole = (await c.post("/v1/chat/completions", json=body, headers=gw.auth())).json()
            ChatCompletion.model_validate(whole)
            chunks = parse(
                (await c.post("/v1/chat/completions", json={**body, "stream": True}, headers=gw.auth())).text
            )
            streamed = "".join(
                ch.data["choices"][0]["delta"].get("content") or ""
                for ch in chunks
                if isinstance(ch.data, dict) and ch.data["choices"]
            )
            choice = whole["choices"][0]
            assert (choice["message"]["content"] or "") == streamed
            assert choice["finish_reason"] == ("tool_calls" if extra else "stop")
            if extra:
                assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
            else:
                assert choice["message"]["reasoning_content"] == "thinking..." and whole["usage"]["total_tokens"] == 45

            anthropic_tools = [{"name": "get_weather", "input_schema": WEATHER["parameters"]}]
            body = {"model": MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": text}]}
            if extra:
                body["tools"] = anthropic_tools
            msg = (await c.post("/v1/messages", json=body, headers=gw.auth())).json()
            AnthropicMessage.model_validate(msg)
            kinds = [b["type"] for b in msg["content"]]
            if extra:
                assert kinds == ["tool_use"] and msg["content"][0]["input"] == {"city": "Paris"}
                assert msg["stop_reason"] == "tool_use"
            else:
                assert kinds == ["thinking", "text"] and msg["content"][1]["text"] == "Hello"
                assert msg["usage"]["output_tokens"] == 3 and msg["stop_reason"] == "end_turn"
