"""Server-sent event framing."""

from __future__ import annotations

import json
from typing import Any

KEEPALIVE = b": keepalive\n\n"
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def frame(data: Any, event: str | None = None, id: int | str | None = None) -> bytes:
    """One event; `data` is JSON-encoded unless it is already a string (OpenAI's `[DONE]`)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    # JSON never holds a raw newline, but a plain string could: each line needs its own data field.
    lines.extend(f"data: {line}" for line in payload.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()
