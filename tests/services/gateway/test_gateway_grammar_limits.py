"""Grammars bounded at the edge (issue 28, items 2, 3 and 7): a response_format, structured_outputs or
tool schema over a grammar limit, or one that cannot match anything, is a 400 naming the limit, in the
API's own error shape, and no work reaches the pipeline."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]


def ref_chain(n: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def fn(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (schema_format(ref_chain(4500)), "response_format.json_schema: a schema of"),
        (schema_format(ref_chain(200)), "response_format.json_schema: $ref chain deeper than 32"),
        (schema_format({"$ref": "#"}), "response_format.json_schema: circular $ref chain"),
        (schema_format({"enum": list(range(10_000))}), "SWITCHYARD_GRAMMAR_MAX_ENUM_VALUES"),
        ({"structured_outputs": {"json": {"$ref": "#/$defs/a"}}}, "structured_outputs.json: $ref '#/$defs/a'"),
        ({"structured_outputs": {"choice": ["x" * 3000] * 256}}, "SWITCHYARD_GRAMMAR_MAX_LITERAL_BYTES"),
        ({"structured_outputs": {"regex": "(" * 3000 + ")" * 3000}}, "SWITCHYARD_GRAMMAR_MAX_REGEX_CHARS"),
        ({"structured_outputs": {"regex": "(" * 100 + ")" * 99}}, "SWITCHYARD_GRAMMAR_MAX_REGEX_DEPTH"),
        ({"structured_outputs": {"regex": "a)"}}, "structured_outputs.regex: unbalanced ')'"),
        ({"tools": [fn({"type": "object"}), fn({"$ref": "#"})]}, "tools[1].function.parameters: circular"),
        ({"tools": [fn(ref_chain(100))], "tool_choice": "required"}, "SWITCHYARD_GRAMMAR_MAX_REF_DEPTH"),
    ],
)
async def test_a_grammar_over_a_limit_is_400_naming_it(
    gw: Gateway, responder: Responder, extra: dict[str, Any], named: str
) -> None:
    n = len(responder.works)
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": USER, **extra},
            headers=gw.auth(gw.pro_key),
        )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"type", "code", "message"} and err["code"] == "bad_request"
    assert named in err["message"], err
    assert len(responder.works) == n


async def test_an_anthropic_tool_schema_over_a_limit_is_400_naming_it(gw: Gateway, responder: Responder) -> None:
    n = len(responder.works)
    tools = [{"name": "f", "input_schema": {"type": "object", "properties": {"a": {"enum": list(range(5000))}}}}]
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/v1/messages",
            json={"model": MODEL, "max_tokens": 16, "messages": USER, "tools": tools},
            headers=gw.auth(gw.pro_key),
        )
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert "tools[0].input_schema: an enum of 5000 values" in r.json()["error"]["message"]
    assert len(responder.works) == n


async def test_schemas_within_the_limits_still_travel(gw: Gateway, responder: Responder) -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": USER, **schema_format(tree), "tools": [fn(ref_chain(10))]},
            headers=gw.auth(gw.pro_key),
        )
    assert r.status_code == 200, r.text
