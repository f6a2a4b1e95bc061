"""Client-defined function tools on the OpenAI-compatible API.

The model is told about the functions in its system block and calls one by answering
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the gateway turns such an answer into
`tool_calls`. Tool results the client sends back become the next user turn, marked as a result."""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import Field

from switchyard.libs.constraints import GrammarLimitError, GrammarLimits, check_tool_schemas
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class FunctionDef(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    # A call the model writes is decoded under its function's schema whether or not this is set.
    strict: bool | None = None


class ToolDef(Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedChoice(Strict):
    type: Literal["function"] = "function"
    function: dict[str, str]


def choice_of(tools: list[ToolDef] | None, choice: str | NamedChoice | None) -> str | None:
    """The pipeline's form of `tool_choice`: None/'auto', 'none', 'required' or 'function:<name>'."""
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        raise ApiError(ErrorCode.bad_request, f"unknown tool_choice {choice!r}: use auto, none, required or a function")
    if not tools:
        if isinstance(choice, NamedChoice):
            raise ApiError(ErrorCode.bad_request, "tool_choice names a function, and the request has no tools")
        return None
    if choice is None or isinstance(choice, str):
        return choice
    name = choice.function.get("name", "")
    if name not in {t.function.name for t in tools}:
        raise ApiError(ErrorCode.bad_request, f"tool_choice names {name!r}, which is not among the tools")
    return f"function:{name}"


def specs(tools: list[ToolDef] | None) -> list[dict[str, Any]]:
    # Only what the prompt shows the model: not `strict`, nor default-valued keys the request carried.
    return [t.function.model_dump(include={"name", "description", "parameters"}) for t in tools or []]


def check_tool_grammars(schemas: list[tuple[str, dict[str, Any]]], limits: GrammarLimits) -> None:
    """Tools' parameter schemas become the grammar a call is decoded under: bounded like any schema."""
    try:
        check_tool_schemas(schemas, limits)
    except GrammarLimitError as e:
        raise ApiError(ErrorCode.bad_request, str(e)) from e


def render_call(name: str, arguments: str) -> str:
    """An earlier assistant tool call, written back the way the model writes one."""
    try:
        args: Any = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        args = arguments
    return OPEN + json.dumps({"name": name, "arguments": args}) + CLOSE


def parse_calls(text: str, names: set[str], limit: int | None = None) -> list[dict[str, Any]]:
    """Every tool call in an answer, in order, as OpenAI `tool_calls` items (at most `limit`); empty
    when the answer is prose. A call whose name is not a tool's is left out, and so is an unclosed call
    after the first (`max_tokens` cut it); the first may be unclosed (the one-call stop string ends it)."""
    calls: list[dict[str, Any]] = []
    for i, piece in enumerate(text.split(OPEN)[1:]):
        if i > 0 and CLOSE not in piece:
            break
        call = parse_call(OPEN + piece, names)
        if call is not None:
            calls.append(call)
        if limit is not None and len(calls) >= limit:
            break
    return calls


def parse_call(text: str, names: set[str]) -> dict[str, Any] | None:
    """The (first) tool call in an answer, as an OpenAI `tool_calls` item; None when the answer is prose.

    A small model may stop before closing its JSON, or ramble on after a complete value, so the call
    is the longest prefix that closes into valid JSON: cut after a string or number value, then
    restore the missing closing braces."""
    start = text.find(OPEN)
    if start < 0:
        return None
    body = text[start + len(OPEN) :].split(CLOSE, 1)[0].split(OPEN, 1)[0].strip()
    call: Any = None
    cuts = [len(body), *sorted((i + 1 for i, ch in enumerate(body) if ch in '"}0123456789'), reverse=True)]
    for cut in cuts:
        call = _close(body[:cut])
        if isinstance(call, dict) and isinstance(call.get("arguments", {}), dict):
            break
    if not isinstance(call, dict) or call.get("name") not in names:
        return None
    args = call.get("arguments", {})
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": call["name"], "arguments": json.dumps(args if isinstance(args, dict) else {})},
    }


def _close(prefix: str) -> Any:
    for fix in ("", "}", "}}", "}}}"):
        try:
            return json.loads(prefix + fix)
        except json.JSONDecodeError:
            continue
    return None
