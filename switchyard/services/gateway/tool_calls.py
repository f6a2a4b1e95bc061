"""Client-defined function tools on the OpenAI-compatible API.

The model is told about the functions in its system block and calls one by answering
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the gateway turns such an answer into
`tool_calls`. Tool results the client sends back become the next user turn, marked as a result."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from switchyard.libs.constraints import GrammarLimitError, GrammarLimits, check_tool_schemas

# The call's text form is shared with inference; the protocol modules import it from here.
from switchyard.libs.constraints.calls import CLOSE as CLOSE
from switchyard.libs.constraints.calls import OPEN as OPEN
from switchyard.libs.constraints.calls import parse_call as parse_call
from switchyard.libs.constraints.calls import parse_calls as parse_calls
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict


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
