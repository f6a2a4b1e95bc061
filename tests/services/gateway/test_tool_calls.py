import json

import pytest

from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.tool_calls import NamedChoice, ToolDef, choice_of, parse_call, parse_calls, render_call

TOOLS = [ToolDef.model_validate({"type": "function", "function": {"name": "get_weather", "parameters": {}}})]


def test_parse_call_restores_missing_braces_and_checks_the_name() -> None:
    call = parse_call('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"', {"get_weather"})
    assert call is not None and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert parse_call('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', {"get_weather"}) is None
    assert parse_call("It is sunny in Paris.", {"get_weather"}) is None
    # Rambling after a complete value: the longest prefix that closes into JSON is the call.
    ramble = parse_call(
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", France, 2022, 2', {"get_weather"}
    )
    assert ramble is not None and json.loads(ramble["function"]["arguments"]) == {"city": "Paris"}
    assert parse_call("<tool_call>not json at all", {"get_weather"}) is None


def test_render_call_round_trips() -> None:
    text = render_call("get_weather", '{"city": "Oslo"}')
    call = parse_call(text, {"get_weather"})
    assert call is not None and json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


def test_choice_of() -> None:
    assert choice_of(None, "required") is None
    assert choice_of(TOOLS, None) is None
    assert choice_of(TOOLS, "required") == "required"
    named = NamedChoice.model_validate({"type": "function", "function": {"name": "get_weather"}})
    assert choice_of(TOOLS, named) == "function:get_weather"
    with pytest.raises(ApiError):
        choice_of(TOOLS, NamedChoice.model_validate({"type": "function", "function": {"name": "nope"}}))
    with pytest.raises(ApiError):
        choice_of(TOOLS, "sometimes")


def test_parse_calls_reads_every_call_and_drops_a_cut_one() -> None:
    one = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    two = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    text = f'{one}\n{two}\n<tool_call>{{"name": "get_weather", "argu'
    calls = parse_calls(text, {"get_weather", "get_time"})
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert len({c["id"] for c in calls}) == 2
    assert [c["function"]["name"] for c in parse_calls(text, {"get_weather", "get_time"}, limit=1)] == ["get_weather"]
    # A name that is not a tool's is left out; the rest stay.
    assert [c["function"]["name"] for c in parse_calls(f"{one}\n{two}", {"get_time"})] == ["get_time"]
    # The first call may be unclosed (the one-call stop string cut its closing tag).
    assert len(parse_calls('<tool_call>{"name": "get_time", "arguments": {}}', {"get_time"})) == 1
    assert parse_calls("It is sunny.", {"get_time"}) == []
