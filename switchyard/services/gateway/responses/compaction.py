"""Compaction (`POST /v1/responses/compact`): a conversation's earlier turns folded into one `compaction` item.

The model writes a summary of the conversation (given to it as its history); the compacted window is the user's messages as they were
and one compaction item carrying that summary. Sent back as input, the item becomes a part of the
instructions ("the conversation so far, summarised"), in its place before the messages after it.

`encrypted_content` is opaque to clients but not encrypted: it is this server's versioned, base64url
encoding of the summary text (a client could write one itself, which gives it nothing a system message
does not already give).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.tool_calls import render_call

PREFIX = "sy1."
# The conversation goes to the model as its history (never re-typed as one text with role names in it, which
# input safety rightly reads as forged turns), then this request as the new user turn. No system prompt of
# ours: input safety judges a request's system text as the client's.
SUMMARY_REQUEST = "Write a short summary of the conversation above, keeping every name, number and decision."
SUMMARY_HEADING = "Summary of the conversation so far:"


def encode(summary: str) -> str:
    raw = json.dumps({"summary": summary}, ensure_ascii=False).encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode()


def decode(content: str, where: str) -> str:
    """The summary a compaction item carries; anything else is a 400 naming the item."""
    if not content.startswith(PREFIX):
        raise ApiError(ErrorCode.bad_request, f"{where}: encrypted_content is not a compaction made by this server")
    try:
        data = json.loads(base64.urlsafe_b64decode(content[len(PREFIX) :].encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError) as e:
        raise ApiError(ErrorCode.bad_request, f"{where}: encrypted_content is damaged") from e
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, str):
        raise ApiError(ErrorCode.bad_request, f"{where}: encrypted_content is damaged")
    return summary


def as_instructions(summary: str) -> str:
    return f"{SUMMARY_HEADING}\n{summary}"


def history_of(response: dict[str, Any]) -> str:
    """A finished response's output as the assistant turn a later prompt shows: its message text, then its
    function calls in the model's own call markup."""
    parts: list[str] = []
    for item in response.get("output", []):
        if item.get("type") == "message":
            parts.extend(str(c.get("text", "")) for c in item.get("content", []) if c.get("type") == "output_text")
        elif item.get("type") == "function_call":
            parts.append(render_call(str(item.get("name", "")), str(item.get("arguments", ""))))
    return "".join(parts)
