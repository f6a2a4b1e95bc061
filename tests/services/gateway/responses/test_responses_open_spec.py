"""The Open Responses specification's cases on the scripted pipeline: each response object (created, streamed,
ended, read back) carries every field the specification requires, tools echo whole, the compliance suite's
text-model requests are served, capabilities the server lacks are refused by name, and a running response
deleted is gone for good."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from switchyard.schemas import DeleteAck, Turn, TurnDelete, Usage, subjects
from switchyard.services.gateway.responses.create import stored_body
from switchyard.services.gateway.responses.models import FunctionToolEcho, ResponseObject, ResponseUsage
from switchyard.services.gateway.settings import GatewaySettings
from tests.services.gateway.harness import Gateway, Responder
from tests.services.gateway.responses.open_spec import (
    FUNCTION_TOOL_REQUIRED,
    RESPONSE_REQUIRED,
    USAGE_REQUIRED,
    required,
)
from tests.services.gateway.responses.test_responses_api import MODEL, _raw_stream
from tests.wait import wait_for

SETTINGS = GatewaySettings(default_temperature=0.3)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
}


async def _post(gw: Gateway, path: str = "/v1/responses", **body: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        return await c.post(path, json={"model": MODEL, **body}, headers=gw.auth())


def test_the_models_require_every_field_the_specification_does() -> None:
    assert RESPONSE_REQUIRED <= required(ResponseObject)
    assert FUNCTION_TOOL_REQUIRED <= required(FunctionToolEcho)
    assert USAGE_REQUIRED <= required(ResponseUsage)


async def test_every_snapshot_has_every_field_and_completed_at_only_at_the_end(gw: Gateway) -> None:
    events = await _raw_stream(gw, input="hello", store=False)  # each event validated against the spec's shape
    snapshots = [e for e in events if "response" in e]
    assert [e["type"] for e in snapshots] == ["response.created", "response.in_progress", "response.completed"]
    for e in snapshots:
        assert RESPONSE_REQUIRED <= set(e["response"])  # type: ignore[arg-type]
    created, progress, completed = (e["response"] for e in snapshots)
    assert created["completed_at"] is None and progress["completed_at"] is None  # type: ignore[index]
    assert completed["completed_at"] >= completed["created_at"]  # type: ignore[index,operator]
    assert completed["service_tier"] == "default" and completed["top_logprobs"] == 0  # type: ignore[index]


async def test_parameters_are_echoed_and_travel_to_the_engine(gw: Gateway, responder: Responder) -> None:
    tool = {"type": "function", "name": "lookup", "parameters": None}  # no description, no strict
    r = await _post(
        gw,
        input="hello",
        store=False,
        presence_penalty=0.5,
        frequency_penalty=-0.25,
        max_tool_calls=2,
        service_tier="priority",
        safety_identifier="user-7",
        prompt_cache_key="k1",
        truncation="auto",
        tools=[WEATHER | {"strict": True}, tool],
    )
    assert r.status_code == 200, r.text
    body = ResponseObject.model_validate(r.json()).model_dump()
    assert (body["presence_penalty"], body["frequency_penalty"], body["max_tool_calls"]) == (0.5, -0.25, 2)
    assert (body["safety_identifier"], body["prompt_cache_key"], body["truncation"]) == ("user-7", "k1", "auto")
    assert body["service_tier"] == "default"  # the tier that served it: there is one
    echoed = r.json()["tools"]
    assert echoed[0]["strict"] is True and echoed[0]["description"] == WEATHER["description"]
    assert echoed[1] == {"type": "function", "name": "lookup", "description": None, "parameters": None, "strict": None}
    work = next(w for w in responder.works if w.rid == body["id"].removeprefix("resp_"))
    assert (work.sampling.presence_penalty, work.sampling.frequency_penalty) == (0.5, -0.25)


async def test_max_tool_calls_caps_the_calls_of_one_answer(gw: Gateway) -> None:
    r = await _post(gw, input="call it", tools=[WEATHER], max_tool_calls=1, store=False)
    calls = [i for i in r.json()["output"] if i["type"] == "function_call"]
    assert len(calls) == 1 and r.json()["max_tool_calls"] == 1


def test_a_stored_response_reads_back_whole() -> None:
    usage = Usage(prompt_tokens=5, completion_tokens=4, ttft_ms=1500.0, tpot_ms=250.0)
    turn = Turn(id="t", rid="a" * 32, user_text="hi", answer="Hello", status="complete", usage=usage, created_ms=10_000)
    body = ResponseObject.model_validate(stored_body("resp_" + "a" * 32, turn, SETTINGS))
    assert body.status == "completed" and body.output[0].type == "message"
    assert body.model == MODEL and body.temperature == 0.3  # the request's own are in its record: defaults
    assert body.completed_at == 10 + round((1500 + 250 * 4) / 1000)  # started + time to write it
    cut = turn.model_copy(update={"finish_reason": "length"})
    back = ResponseObject.model_validate(stored_body("resp_" + "a" * 32, cut, SETTINGS))
    assert back.status == "incomplete" and back.completed_at is None


@pytest.mark.parametrize(
    "request_body",
    [
        # The compliance suite's text-model requests (bin/compliance-test.ts), each a completed response.
        {"input": [{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}]},
        {
            "input": [
                {"type": "message", "role": "system", "content": "You are a pirate."},
                {"type": "message", "role": "user", "content": "Say hello."},
            ]
        },
        {
            "input": [
                {"type": "message", "role": "user", "content": "My name is Alice."},
                {"type": "message", "role": "assistant", "content": "Hello Alice!"},
                {"type": "message", "role": "user", "content": "What is my name?"},
            ]
        },
        {
            "input": [
                {"type": "message", "role": "assistant", "phase": "commentary", "content": "I should answer."},
                {"type": "message", "role": "assistant", "phase": "final_answer", "content": "The number is four."},
                {"type": "message", "role": "user", "content": "Repeat only the number."},
            ]
        },
    ],
)
async def test_the_compliance_suites_text_requests(gw: Gateway, request_body: dict[str, Any]) -> None:
    r = await _post(gw, **request_body)
    assert r.status_code == 200, r.text
    body = ResponseObject.model_validate(r.json())
    assert body.status == "completed" and body.output


async def test_the_compliance_suites_tool_call_streams_its_arguments(gw: Gateway) -> None:
    events = await _raw_stream(gw, input="call the weather tool", tools=[WEATHER])
    kinds = [e["type"] for e in events]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added and added[0]["item"]["type"] == "function_call"  # type: ignore[index]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ({"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}, "input_image"),
        (
            {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
            "input_file",
        ),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "input_audio"),
    ],
)
async def test_media_input_is_refused_by_name(gw: Gateway, part: dict[str, Any], named: str) -> None:
    content = [{"type": "input_text", "text": "What is this?"}, part]
    r = await _post(gw, input=[{"type": "message", "role": "user", "content": content}])
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"type", "code", "message"} and error["code"] == "bad_request"
    assert error["message"] == f"model {MODEL!r} takes text only: input[0].content[1] is an {named} part"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0]: tool type 'web_search' is not served"),
        ({"tools": [WEATHER, {"type": "file_search", "vector_store_ids": ["v"]}]}, "tools[1]: tool type 'file_search'"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice of type 'web_search' is not served"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]: item_reference items are not served"),
        ({"input": [{"type": "compaction", "encrypted_content": "forged"}]}, "not a compaction made by this server"),
        ({"previous_response_id": "resp_openresponses_missing_1"}, "is not a response id"),
    ],
)
async def test_unsupported_capabilities_are_refused_by_name(gw: Gateway, body: dict[str, Any], named: str) -> None:
    r = await _post(gw, **{"input": "hi", **body})
    assert r.status_code == 400, r.text
    assert named in r.json()["error"]["message"] and set(r.json()["error"]) == {"type", "code", "message"}


@pytest.fixture
async def turn_deletes(responder: Responder) -> AsyncIterator[list[TurnDelete]]:
    """The context service's turn deletion, as the scripted pipeline's: each one recorded."""
    seen: list[TurnDelete] = []

    async def delete(d: TurnDelete) -> DeleteAck:
        seen.append(d)
        return DeleteAck(id=d.rid)

    sub = await responder.bus.subscribe(subjects.TURN_DELETE, TurnDelete, delete)
    await responder.bus.flush()
    yield seen
    await sub.unsubscribe()


async def test_deleting_a_running_response_cancels_it_and_it_stays_gone(
    gw: Gateway, responder: Responder, turn_deletes: list[TurnDelete]
) -> None:
    r = await _post(gw, input="hang until cancelled", background=True)
    assert r.status_code == 200 and r.json()["status"] == "in_progress"
    rid_id = r.json()["id"]
    rid = rid_id.removeprefix("resp_")
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        await wait_for(lambda: rid in responder.cancelled, what="the pipeline to take the work")
        assert (await c.get(f"/v1/responses/{rid_id}", headers=gw.auth())).json()["status"] == "in_progress"
        deleted = await c.delete(f"/v1/responses/{rid_id}", headers=gw.auth())
        assert deleted.status_code == 200 and deleted.json() == {"id": rid_id, "object": "response", "deleted": True}
        # The run was cancelled (nothing keeps decoding it) and whatever the pipeline saved for it deleted.
        assert any(n.rid == rid for n in responder.cancels)
        assert [(d.chat_id, d.rid) for d in turn_deletes] == [(rid_id, rid)]
        for method in ("GET", "DELETE"):
            gone = await c.request(method, f"/v1/responses/{rid_id}", headers=gw.auth())
            assert gone.status_code == 404, (method, gone.text)
        cancel = await c.post(f"/v1/responses/{rid_id}/cancel", headers=gw.auth())
        assert cancel.status_code == 404
        chained = await c.post(
            "/v1/responses", json={"model": MODEL, "input": "more", "previous_response_id": rid_id}, headers=gw.auth()
        )
        assert chained.status_code == 404


async def test_compact_is_a_route_not_a_response_id(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/v1/responses/compact", json={"input": "hi"}, headers=gw.auth())
    assert r.status_code == 400 and "model" in r.json()["error"]["message"]  # the body's check, not a 405
