"""Which registered MCP tools a user message calls for, before the model writes, and their arguments.

A clause plans a tool when it names it (`inventory__lookup_stock`, or its own name where that is an
identifier such as `lookup_stock`), or when its embedding is close to the tool's name and description.
Arguments come from the clause only where the tool's schema leaves no doubt: no required argument, or a
single one (a string gets the clause's first quoted text, else the clause; a number its first number).
A tool that needs more is left for the model, which sees it in `GET /v1/tools`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from switchyard.schemas.mcp import McpToolSpec

QUOTED = re.compile(r"[\"\u201c']([^\"\u201d']{1,500})[\"\u201d']")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class PlannableTool:
    spec: McpToolSpec
    vector: np.ndarray | None  # unit vector of its name and description; None before it is embedded


def description_text(tool: McpToolSpec) -> str:
    """What the planner compares a clause with: the tool's name as words, and its description."""
    return f"{tool.tool.replace('_', ' ').replace('-', ' ')}: {tool.description}"[:512]


def names_tool(clause: str, tool: McpToolSpec) -> bool:
    lowered = clause.lower()
    if tool.name.lower() in lowered:
        return True
    # A bare tool name counts only when it is an identifier nobody writes in prose (`lookup_stock`).
    own = tool.tool.lower()
    return ("_" in own or "-" in own) and re.search(rf"(?<![\w-]){re.escape(own)}(?![\w-])", lowered) is not None


def arguments_for(schema: dict[str, Any], clause: str) -> dict[str, Any] | None:
    """The call's arguments from `clause`; None when the schema asks for what a clause cannot say."""
    props = schema.get("properties") or {}
    required = list(schema.get("required") or [])
    if not isinstance(props, dict) or not isinstance(required, list):
        return None
    if len(required) > 1:
        return None
    if not required:
        strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
        if len(strings) != 1:
            return {}
        required = strings
    name = required[0]
    kind = (props.get(name) or {}).get("type", "string") if isinstance(props.get(name), dict) else "string"
    if kind == "string":
        quoted = QUOTED.search(clause)
        return {name: quoted.group(1) if quoted else clause.strip()}
    if kind in ("integer", "number"):
        num = NUMBER.search(clause)
        if num is None:
            return None
        value = float(num.group(0))
        return {name: int(value) if kind == "integer" else value}
    return None


def match(
    clauses: Sequence[str], vectors: Sequence[np.ndarray], tools: Sequence[PlannableTool], threshold: float
) -> list[tuple[McpToolSpec, dict[str, Any]]]:
    """(tool, arguments) for each clause that names a tool or is close to one, in clause order."""
    out: list[tuple[McpToolSpec, dict[str, Any]]] = []
    for i, clause in enumerate(clauses):
        chosen = next((t.spec for t in tools if names_tool(clause, t.spec)), None)
        if chosen is None and i < len(vectors):
            scored = [(float(t.vector @ vectors[i]), t.spec) for t in tools if t.vector is not None]
            if scored:
                score, best = max(scored, key=lambda s: s[0])
                chosen = best if score >= threshold else None
        if chosen is None:
            continue
        args = arguments_for(chosen.input_schema, clause)
        if args is not None:
            out.append((chosen, args))
    return out
