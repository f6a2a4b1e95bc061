"""Issue 28, items 2, 3 and 7, against the real stack (real NATS, real engine): constraints that crashed
inference, held it for minutes or answered an empty 200 are each a 400 naming the limit, at once, and
the stack serves the next request from the same inference process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import Stack

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "Answer briefly."}]


def ref_chain(n: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def chat(client: httpx.Client, **extra: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 4, **extra})


@pytest.fixture
def same_inference(stack: Stack, client: httpx.Client) -> Iterator[None]:
    """The inference process before the attack is the one that answers after it."""
    proc = stack.procs["inference"]
    yield
    r = chat(client, structured_outputs={"choice": ["yes", "no"]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] in ("yes", "no"), r.text
    assert stack.procs["inference"] is proc and proc.poll() is None


def refused(client: httpx.Client, extra: dict[str, Any], named: str, stream: bool = False) -> None:
    t0 = time.monotonic()
    r = chat(client, stream=stream, **extra)
    # Generous: the point is no crash and no 120 s compile, not a benchmark.
    assert time.monotonic() - t0 < 30
    assert r.status_code == 400, r.text[:500]
    err = r.json()["error"]
    assert err["code"] == "bad_request" and named in err["message"], err


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # Item 2: 4,500 $refs, 430 KB of flat JSON, overflowed xgrammar's stack (SIGSEGV).
        (schema_format(ref_chain(4500)), "SWITCHYARD_GRAMMAR_MAX_SCHEMA_BYTES"),
        (schema_format(ref_chain(200)), "$ref chain deeper than 32 (limit SWITCHYARD_GRAMMAR_MAX_REF_DEPTH)"),
        # Item 3: ~15 CPU-s and ~250 MB kept per distinct schema; 120 s and a 504.
        (schema_format({"enum": list(range(10_000))}), "SWITCHYARD_GRAMMAR_MAX_ENUM_VALUES"),
        ({"structured_outputs": {"choice": ["x" * 3000] * 256}}, "SWITCHYARD_GRAMMAR_MAX_LITERAL_BYTES"),
    ],
)
def test_grammars_that_crashed_or_held_inference_are_400_naming_the_limit(
    client: httpx.Client, same_inference: None, extra: dict[str, Any], named: str
) -> None:
    refused(client, extra, named)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # Item 7: each answered 200 with empty content and finish_reason "stop".
        ({"structured_outputs": {"regex": "(" * 3000 + ")" * 2999}}, "structured_outputs.regex"),
        ({"structured_outputs": {"regex": "(" * 100 + ")" * 99}}, "SWITCHYARD_GRAMMAR_MAX_REGEX_DEPTH"),
        (schema_format({"$ref": "#"}), "circular $ref chain"),
        # Past the edge's structural checks, the engine's own refusal travels back as a 400 too.
        (schema_format({"type": "nonsense"}), "invalid json_schema constraint"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_invalid_constraints_are_400_never_an_empty_200(
    client: httpx.Client, same_inference: None, extra: dict[str, Any], named: str, stream: bool
) -> None:
    refused(client, extra, named, stream)
