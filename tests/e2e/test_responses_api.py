"""OpenAI's Responses API through the official SDK on the real stack and the real model: streamed and not,
a function tool round trip chained by `previous_response_id`, a chain as one stored conversation, reading
and deleting by id, cancelling, tenancy and the errors."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response
from pydantic import TypeAdapter
from websockets.asyncio.client import connect

from switchyard.cli.keys import main as keys_main
from switchyard.cli.stack import Stack
from switchyard.libs.store.db import database_url
from switchyard.services.gateway.responses.models import CompactionObject, ResponseObject
from tests.e2e.conftest import admin_record
from tests.services.gateway.responses.open_spec import RESPONSE_REQUIRED, OpenEvent

MODEL = "SmolLM2-135M-Instruct"
OPEN_EVENT: TypeAdapter[OpenEvent] = TypeAdapter(OpenEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _client(stack: Stack, key: str | None = None) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=key or stack.api_key, max_retries=0, timeout=120)


def _prompt(stack: Stack, response_id: str) -> str:
    rid = response_id.rsplit("_", 1)[-1]
    prompt: str = admin_record(stack, rid, lambda r: "prompt" in r["record"])["record"]["prompt"]
    return prompt


def test_create_stream_and_read_back(stack: Stack, client: httpx.Client) -> None:
    sdk = _client(stack)
    resp = sdk.responses.create(model=MODEL, input="Say hello in one short sentence.", max_output_tokens=24)
    Response.model_validate(resp.model_dump())
    assert resp.status in ("completed", "incomplete") and resp.output_text.strip()
    assert resp.usage is not None and resp.usage.output_tokens > 0

    # Stored by default: read back by id, the same answer; the chain is a conversation in the console's list.
    again = sdk.responses.retrieve(resp.id)
    assert again.output_text == resp.output_text and again.status == resp.status
    chats = client.get("/v1/conversations", params={"limit": 200}).json()["items"]
    assert resp.id in [c["chat_id"] for c in chats]

    # Cut by max_output_tokens: incomplete as it came, and as it reads back from the store.
    cut = sdk.responses.create(model=MODEL, input="Tell me a long story about the sea.", max_output_tokens=4)
    assert cut.status == "incomplete" and cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    back = sdk.responses.retrieve(cut.id)
    assert back.status == "incomplete" and back.incomplete_details is not None
    assert back.incomplete_details.reason == "max_output_tokens" and back.output_text == cut.output_text

    # Streamed: the SDK parses every event; the deltas are the final response's text.
    stream = sdk.responses.create(model=MODEL, input="Name a colour.", max_output_tokens=16, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and deltas.strip()


def test_previous_response_id_continues_the_conversation(stack: Stack, client: httpx.Client) -> None:
    sdk = _client(stack)
    first = sdk.responses.create(model=MODEL, input="My name is Ada Lovelace.", max_output_tokens=20)
    second = sdk.responses.create(
        model=MODEL, input="What is my name?", previous_response_id=first.id, max_output_tokens=20
    )
    assert second.previous_response_id == first.id and second.id.startswith(first.id + "_")
    # The chain's context is the stored conversation: the first turn is in the second's prompt.
    prompt = _prompt(stack, second.id)
    assert "My name is Ada Lovelace." in prompt and first.output_text.strip()[:30] in prompt
    turns = client.get(f"/v1/conversations/{first.id}").json()["turns"]
    assert [t["user_text"] for t in turns] == ["My name is Ada Lovelace.", "What is my name?"]

    # Branching from an earlier response is refused by name; a response that does not exist is 404.
    with pytest.raises(openai.BadRequestError, match="latest response"):
        sdk.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model=MODEL, input="hi", previous_response_id="resp_" + "0" * 32)


def test_function_tool_round_trip(stack: Stack) -> None:
    sdk = _client(stack)
    resp = sdk.responses.create(
        model=MODEL,
        input="What is the weather in Paris right now?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40,
    )
    calls = [i for i in resp.output if i.type == "function_call"]
    # A forced call first; with parallel_tool_calls (the default) the model may add more on their own lines.
    assert calls and all(c.name == "get_weather" for c in calls), resp.output
    assert all(isinstance(json.loads(c.arguments), dict) for c in calls)
    assert len({c.call_id for c in calls}) == len(calls)

    # The client runs the functions and sends only their outputs, chained to the response that asked.
    outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": '{"temp_c": 18}'} for c in calls]
    answer = sdk.responses.create(
        model=MODEL,
        previous_response_id=resp.id,
        input=outputs,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        max_output_tokens=30,
    )
    assert answer.status in ("completed", "incomplete") and answer.output_text.strip()
    prompt = _prompt(stack, answer.id)
    assert "get_weather" in prompt and '{"temp_c": 18}' in prompt
    # Read back from the store, the call is still a function_call item with the same call id.
    stored = sdk.responses.retrieve(resp.id)
    assert [(i.type, getattr(i, "call_id", None)) for i in stored.output] == [
        ("function_call", c.call_id) for c in calls
    ]

    # parallel_tool_calls: false keeps one call.
    one = sdk.responses.create(
        model=MODEL,
        input="What is the weather in Oslo right now?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_output_tokens=40,
        store=False,
    )
    assert [i.type for i in one.output] == ["function_call"] and one.parallel_tool_calls is False


def test_json_schema_format_is_decoded_under_its_grammar(stack: Stack) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    resp = _client(stack).responses.create(
        model=MODEL,
        input="A forecast for Paris for 3 days, as JSON.",
        text={"format": {"type": "json_schema", "name": "forecast", "schema": schema, "strict": True}},
        max_output_tokens=60,
        store=False,
    )
    got = json.loads(resp.output_text)
    assert got["city"] in ("Paris", "Oslo") and isinstance(got["days"], int)


def test_delete_cancel_and_tenancy(stack: Stack) -> None:
    sdk = _client(stack)
    resp = sdk.responses.create(model=MODEL, input="Hello!", max_output_tokens=8)
    with pytest.raises(openai.BadRequestError, match="not in progress"):
        sdk.responses.cancel(resp.id)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        db = database_url(None, str(stack.data_dir), "gateway")
        assert keys_main(["--database-url", db, "create", "--tenant", "resp-other", "--tier", "free"]) == 0
    other = _client(stack, next(w for w in out.getvalue().split() if w.startswith("sy-")))
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="hi", previous_response_id=resp.id)

    sdk.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(resp.id)

    # A background response runs with nobody reading it; cancelling it keeps what was written so far.
    bg = sdk.responses.create(
        model=MODEL, input="Write a very long story about a dragon.", background=True, max_output_tokens=400
    )
    assert bg.status == "in_progress" and bg.background
    cancelled = sdk.responses.cancel(bg.id)
    assert cancelled.status == "cancelled"
    assert sdk.responses.retrieve(bg.id).status == "cancelled"


# ---- the Open Responses specification on the real stack ---------------------------------------------------

COMPLIANCE_TEXT_REQUESTS = [
    [{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}],
    [{"type": "message", "role": "user", "content": "Count from 1 to 5."}],
    [
        {"type": "message", "role": "system", "content": "You are a pirate. Always respond in pirate speak."},
        {"type": "message", "role": "user", "content": "Say hello."},
    ],
    [
        {"type": "message", "role": "user", "content": "My name is Alice."},
        {"type": "message", "role": "assistant", "content": "Hello Alice! Nice to meet you."},
        {"type": "message", "role": "user", "content": "What is my name?"},
    ],
]


def test_the_compliance_suites_text_requests_complete_with_every_field(client: httpx.Client) -> None:
    for stream in (False, True):
        for items in COMPLIANCE_TEXT_REQUESTS:
            body = {"model": MODEL, "input": items, "stream": stream}
            if stream:
                with client.stream("POST", "/v1/responses", json=body) as r:
                    assert r.status_code == 200
                    lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
                assert lines[-1] == "[DONE]"
                events = [json.loads(line) for line in lines[:-1]]
                for e in events:
                    OPEN_EVENT.validate_python(e)
                final = events[-1]["response"]
            else:
                r = client.post("/v1/responses", json=body)
                assert r.status_code == 200, r.text
                final = r.json()
            ResponseObject.model_validate(final)
            assert RESPONSE_REQUIRED <= set(final)
            # Completed, unless the small model ran on to the default token limit (the suite's own ask).
            assert final["output"] and final["status"] in ("completed", "incomplete"), final
            if final["status"] == "completed":
                assert final["completed_at"] >= final["created_at"]
            else:
                assert final["incomplete_details"] == {"reason": "max_output_tokens"} and final["completed_at"] is None
    # Read back from the store: the same fields.
    back = client.get(f"/v1/responses/{final['id']}").json()
    assert RESPONSE_REQUIRED <= set(back) and back["output"] == final["output"]


def test_image_input_is_refused_by_name(client: httpx.Client) -> None:
    content = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": "data:,x"}]
    r = client.post("/v1/responses", json={"model": MODEL, "input": [{"role": "user", "content": content}]})
    assert r.status_code == 400 and "takes text only" in r.json()["error"]["message"]


def test_compact_then_continue_from_the_window(client: httpx.Client) -> None:
    conversation = [
        {"type": "message", "role": "user", "content": "We agreed to launch on Tuesday and notify support first."},
        {"type": "message", "role": "assistant", "content": "Understood: launch Tuesday, support first."},
    ]
    r = client.post("/v1/responses/compact", json={"model": MODEL, "input": conversation})
    assert r.status_code == 200, r.text
    window = CompactionObject.model_validate(r.json())
    assert [i.type for i in window.output] == ["message", "compaction"] and window.usage.output_tokens > 0
    nxt = client.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "store": False,
            "max_output_tokens": 24,
            "input": [*r.json()["output"], {"role": "user", "content": "When do we launch?"}],
        },
    )
    assert nxt.status_code == 200 and nxt.json()["status"] in ("completed", "incomplete"), nxt.text


def test_websocket_mode_streams_and_continues_store_false(stack: Stack) -> None:
    async def session() -> None:
        url = stack.url.replace("http://", "ws://") + "/v1/responses"
        async with connect(url, additional_headers={"Authorization": f"Bearer {stack.api_key}"}) as ws:

            async def turn(**body: object) -> list[dict[str, object]]:
                await ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False, **body}))
                got = []
                while True:
                    got.append(json.loads(await ws.recv()))
                    if got[-1]["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                        return got

            first = await turn(input="My favourite colour is cobalt blue.", max_output_tokens=16)
            for e in first:
                OPEN_EVENT.validate_python(e)
            assert first[-1]["type"] in ("response.completed", "response.incomplete")
            first_id = first[-1]["response"]["id"]  # type: ignore[index]
            second = await turn(
                input="What is my favourite colour?", previous_response_id=first_id, max_output_tokens=16
            )
            assert second[-1]["type"] in ("response.completed", "response.incomplete"), second[-1]
            prompt = _prompt(stack, second[-1]["response"]["id"])  # type: ignore[index]
            assert "cobalt blue" in prompt  # the first turn, kept on the connection only, is the second's context

    asyncio.run(session())


def test_deleting_a_running_response_leaves_nothing(stack: Stack, client: httpx.Client) -> None:
    sdk = _client(stack)
    bg = sdk.responses.create(
        model=MODEL, input="Write a very long story about a dragon.", background=True, max_output_tokens=400
    )
    assert sdk.responses.retrieve(bg.id).status == "in_progress"
    deleted = client.delete(f"/v1/responses/{bg.id}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(bg.id)
    # Nothing was stored behind the client's back: the conversation went with its only turn.
    assert client.get(f"/v1/conversations/{bg.id}").status_code == 404
