"""The ids a client sends, as parameter types: each is checked against its pattern before a handler runs,
so a malformed id is 400 in the one error shape and never reaches the bus (a rid of `>` once
read every tenant's stream).

Request, file, memory-item and key ids are the server's own (`switchyard.schemas.subjects.ID_PATTERN`). Chat ids are
the client's names for its conversations and may also hold `.` and `:`; they travel in message bodies,
never in a subject (and `switchyard.schemas.subjects.token` would refuse them there).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import Field

from switchyard.schemas.subjects import ID_PATTERN

CHAT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"

Id = Annotated[str, Field(pattern=ID_PATTERN)]
ChatId = Annotated[str, Field(pattern=CHAT_ID_PATTERN)]

RidPath = Annotated[str, Path(pattern=ID_PATTERN, description="a request id (the `x-request-id` of a response)")]
FileIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="a file id (`file-...`)")]
ItemIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="a memory item id")]
KeyIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="an API key id (`key_...`)")]
ChatIdPath = Annotated[str, Path(pattern=CHAT_ID_PATTERN, description="a conversation id")]
ChatIdQuery = Annotated[str | None, Query(alias="chatId", pattern=CHAT_ID_PATTERN)]
