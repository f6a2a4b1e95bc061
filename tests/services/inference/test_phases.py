"""Which grammar an answer decodes under, and that a forced tool call's opening fits its grammar."""

from __future__ import annotations

import json

import pytest

from switchyard.libs.engine.grammar import Grammars
from switchyard.libs.tokenizer import load_tokenizer
from switchyard.schemas import ResponseFormat, Sampling, Work
from switchyard.services.inference.phases import answer_constraint, tool_prefill

WEATHER = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        # The required string argument is not the first property: the grammar must still open with it.
        "properties": {"unit": {"enum": ["c", "f"]}, "city": {"type": "string"}},
        "required": ["city"],
    },
}
TIME = {"name": "get_time", "parameters": {}}


def _work(tool_choice: str | None = None, tools: bool = True, fmt: ResponseFormat | None = None) -> Work:
    return Work(
        rid="r",
        tenant="t",
        user="u",
        key_id="k",
        text="hi",
        client_tools=[WEATHER, TIME] if tools else [],
        tool_choice=tool_choice,
        sampling=Sampling(response_format=fmt),
    )


@pytest.fixture(scope="module")
def grammars() -> Grammars:
    tok = load_tokenizer()
    return Grammars(tok, tok.vocab_size)


@pytest.mark.parametrize("choice", ["required", "function:get_weather", "function:get_time", "auto"])
def test_tool_choices_get_a_tools_grammar_that_takes_their_opening(grammars: Grammars, choice: str) -> None:
    work = _work(choice)
    prefill = tool_prefill(work.client_tools, choice)
    c = answer_constraint(work, prefill)
    assert c is not None and c.kind == "tools" and c.prefix == prefill
    spec = json.loads(c.spec)
    assert spec["mode"] == ("auto" if choice == "auto" else "required")
    if choice.startswith("function:"):
        assert [t["name"] for t in spec["tools"]] == [choice.removeprefix("function:")]
    matcher = grammars.matcher(c)  # raises when the opening does not fit
    assert not matcher.is_terminated()


def test_a_forced_call_wins_over_a_response_format_and_auto_does_not() -> None:
    fmt = ResponseFormat(type="json_object")
    forced = answer_constraint(_work("required", fmt=fmt))
    assert forced is not None and forced.kind == "tools"
    auto = answer_constraint(_work("auto", fmt=fmt))
    assert auto is not None and auto.kind == "json_object"


@pytest.mark.parametrize(
    ("fmt", "kind", "spec"),
    [
        (ResponseFormat(type="json_schema", json_schema={"type": "object"}), "json_schema", '{"type": "object"}'),
        (ResponseFormat(type="regex", regex="[0-9]+"), "regex", "[0-9]+"),
        (ResponseFormat(type="choice", choices=["a", "b"]), "choice", '["a", "b"]'),
    ],
)
def test_response_formats_become_constraints(fmt: ResponseFormat, kind: str, spec: str) -> None:
    c = answer_constraint(_work(tools=False, fmt=fmt))
    assert c is not None and (c.kind, c.spec) == (kind, spec)


def test_nothing_asked_is_unconstrained() -> None:
    assert answer_constraint(_work(tools=False)) is None
    assert answer_constraint(_work("none")) is None


@pytest.mark.parametrize(
    ("choice", "first", "second"),
    [
        ("required", 'get_weather", "arguments": {"city": "Paris"}}', '{"name": "get_time", "arguments": {}}'),
        ("function:get_weather", 'Paris"}}', '{"name": "get_weather", "arguments": {"city": "Oslo"}}'),
    ],
)
def test_parallel_calls_get_a_grammar_that_takes_more_calls(
    grammars: Grammars, choice: str, first: str, second: str
) -> None:
    work = _work(choice)
    work.parallel_tool_calls = True
    prefill = tool_prefill(work.client_tools, choice)
    c = answer_constraint(work, prefill)
    assert c is not None and json.loads(c.spec)["parallel"] is True
    m = grammars.matcher(c)
    assert m.accept_string(first + "</tool_call>")
    assert m.accept_string(f"\n<tool_call>{second}</tool_call>")
    assert not m.accept_string("\nand some prose")
    # Not parallel: the grammar ends with the first call.
    one = answer_constraint(_work(choice), prefill)
    assert one is not None and "parallel" not in json.loads(one.spec)
    m = grammars.matcher(one)
    assert m.accept_string(first + "</tool_call>") and not m.accept_string("\n")
