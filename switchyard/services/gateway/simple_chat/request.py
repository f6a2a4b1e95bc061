"""`POST /chat`'s request: a conversation id and the new message's text, with optional sampling."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from switchyard.schemas.messages import Mode
from switchyard.services.gateway.ids import CHAT_ID_PATTERN, Id


class ChatRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    chat_id: str = Field(alias="chatId", pattern=CHAT_ID_PATTERN)
    text: str
    model: str | None = None
    mode: Mode | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    file_ids: list[Id] = Field(default_factory=list, alias="fileIds", max_length=10)
