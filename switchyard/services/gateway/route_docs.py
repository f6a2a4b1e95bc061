"""What a route declares about its success body for the API document (`responses=` on its decorator),
where that is not one JSON body FastAPI can read from `response_model`: server-sent events, JSON lines,
Prometheus text. openapi.py adds the error statuses, in the one error shape, to every operation."""

from __future__ import annotations

from typing import Any

JSON, SSE, JSONL, TEXT = "application/json", "text/event-stream", "application/x-ndjson", "text/plain"

# One server-sent event, as a client's parser hands it over (its `data` is the protocol's JSON, as text).
_STREAM = {
    "type": "object",
    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
}


def sse(description: str = "server-sent events") -> dict[int | str, dict[str, Any]]:
    """A route that always streams (its response_class is EventSourceResponse)."""
    return {200: {"description": description, "content": {SSE: {"schema": _STREAM}}}}


def json_or_sse(
    description: str = "one JSON body, or with `stream: true` server-sent events",
) -> dict[int | str, dict[str, Any]]:
    """A protocol route that answers JSON, or SSE when the client asks to stream. The JSON body stays `{}`
    in the document where no pydantic model of it exists yet (the OpenAI and Anthropic answer shapes)."""
    return {200: {"description": description, "content": {SSE: {"schema": _STREAM}}}}


def jsonl(description: str = "one JSON object a line") -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {JSONL: {"schema": {}}}}}


def prometheus() -> dict[int | str, dict[str, Any]]:
    return {200: {"description": "Prometheus text exposition", "content": {TEXT: {"schema": {}}}}}


def body(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    """A JSON body a handler builds as a dict: documented by `model`, never re-validated by it (the route
    says `response_model=None`), so what the client gets is byte for byte what the handler returns."""
    return {200: {"model": model}}
