"""The text form of a tool call, as the model writes one: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
Read by the gateway (a client's function call becomes OpenAI `tool_calls`) and by inference (a call to an
MCP tool the pipeline runs itself)."""

from __future__ import annotations

import json
import uuid
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


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
