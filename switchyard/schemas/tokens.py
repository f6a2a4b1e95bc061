"""Token counting (`POST /tokenize`, `/detokenize`, `/v1/messages/count_tokens`): the context service,
which renders every prompt, renders the same prompt for the client's messages and encodes it with the
tokenizer the engine uses, so a count is what the model would be sent. Request/reply on
`subjects.TOKENIZE` and `subjects.DETOKENIZE`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from switchyard.schemas.messages import ChatMessage


class TokenizeQuery(BaseModel):
    """Either a raw `prompt` (encoded as it is), or a chat: `text` (the new user message), the earlier
    `messages`, `system` and client tools, rendered as the context stage renders them for the pipeline."""

    tenant: str
    user: str = ""
    model: str | None = None
    prompt: str | None = None
    text: str = ""
    messages: list[ChatMessage] = Field(default_factory=list)
    system: str | None = None
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | None = None
    add_generation_prompt: bool = True
    # The answer's start the prompt ends inside (as `Work.prefill`).
    prefill: str | None = None
    # False: only the count (no ids to carry back).
    ids: bool = True
    token_strs: bool = False
    # The asker may read the tenant's operator-set instructions (an admin key). Otherwise the count is the
    # whole prompt's, as the engine is sent it, and the ids are those of the prompt without them.
    operator_view: bool = False


class TokenizeReply(BaseModel):
    count: int
    # The context budget prompts are rendered into: prompt tokens plus max_tokens must fit in it.
    max_model_len: int
    tokens: list[int] = Field(default_factory=list)
    token_strs: list[str] | None = None


class DetokenizeQuery(BaseModel):
    tenant: str
    model: str | None = None
    tokens: list[int]


class DetokenizeReply(BaseModel):
    prompt: str
