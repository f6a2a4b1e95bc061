"""The simple protocol's encoder: every event of a run as `id: <seq>` / `event: <type>` / `data: <json>` (pure:
events in, SSE events out)."""

from __future__ import annotations

from typing import Any

from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ErrorCode
from switchyard.services.gateway.runs.relay import Encoder, sse


def chat_payload(event: ChatEvent) -> dict[str, Any]:
    """The `data` of one /chat SSE event."""
    if event.type in ("delta", "thinking"):
        return {"text": event.text}
    if event.type == "tool":
        return event.tool.model_dump(mode="json") if event.tool is not None else {}
    if event.type == "done":
        usage = event.usage.model_dump(mode="json") if event.usage is not None else {}
        return {**usage, "finish_reason": event.finish_reason, "model": event.model, "rid": event.rid}
    if event.error is not None:
        return event.error.model_dump(mode="json")
    return {"message": "unknown error", "code": ErrorCode.internal.value, "type": "api_error"}


class ChatEncoder(Encoder):
    """Every event as `id: <seq>` / `event: <type>` / `data: <json>`; a comment keeps the line alive."""

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        return [sse(chat_payload(event), event=event.type, id=seq)]
