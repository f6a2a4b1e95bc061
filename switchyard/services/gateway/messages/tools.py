"""Client tools on the Anthropic-compatible API: `tools` with `input_schema`, `tool_choice`
(`auto`, `any`, `tool`, `none`), `tool_use` blocks in answers and earlier turns, `tool_result` blocks
back. The pipeline sees them exactly as the OpenAI route's function tools (`tool_calls.py`): the same
prompt format, the same grammar-constrained call, the same parser."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.tool_calls import render_call


class AnthropicTool(Strict):
    IGNORED = frozenset({"cache_control"})
    type: Literal["custom"] | None = None
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class AnthropicToolChoice(Strict):
    # An answer carries at most one tool call, which is what disabling parallel use asks for.
    IGNORED = frozenset({"disable_parallel_tool_use"})
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


def tool_specs(tools: list[AnthropicTool] | None) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "parameters": t.input_schema} for t in tools or []]


def pipeline_choice(tools: list[AnthropicTool] | None, choice: AnthropicToolChoice | None) -> str | None:
    """The pipeline's `tool_choice`: None/'auto', 'none', 'required' (Anthropic's `any`) or 'function:<name>'."""
    if choice is None or choice.type == "auto":
        return None
    if not tools:
        raise ApiError(ErrorCode.bad_request, f"tool_choice {choice.type!r} needs tools")
    if choice.type == "none":
        return "none"
    if choice.type == "any":
        return "required"
    if choice.name not in {t.name for t in tools}:
        raise ApiError(ErrorCode.bad_request, f"tool_choice names {choice.name!r}, which is not among the tools")
    return f"function:{choice.name}"


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped parsed call (`tool_calls.parse_call`) as an Anthropic `tool_use` block."""
    fn = call["function"]
    return {
        "type": "tool_use",
        "id": "toolu_" + call["id"].removeprefix("call_"),
        "name": fn["name"],
        "input": json.loads(fn["arguments"]),
    }


def used(name: str | None, data: Any) -> str:
    """An earlier `tool_use` block, written back the way the model writes a call."""
    return render_call(name or "", json.dumps(data if data is not None else {}))


def result_text(content: Any) -> str:
    """A `tool_result` block's content: a string, or text blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if not isinstance(item, dict) or item.get("type") != "text":
                raise ApiError(ErrorCode.bad_request, "tool_result content must be text")
            parts.append(str(item.get("text", "")))
        return "".join(parts)
    raise ApiError(ErrorCode.bad_request, "tool_result content must be a string or text blocks")
