"""`subjects.TOKENIZE` and `subjects.DETOKENIZE`: the prompt the context stage would render for a
client's messages, encoded with the tokenizer the engine uses, so a count is what the model would be
sent (system block with tools, tenant instructions and saved memory; history; the new message; the chat
template). The rendering is `Context`'s own; nothing here formats a prompt.

History is not trimmed here: a count over `max_model_len` is a prompt the pipeline would shorten (or
refuse). Tool results the tools stage may add for a message are not known before tools run.

The tenant's instructions are the operator's: a query without `operator_view` (any key but an admin
key) gets the count of the whole prompt, instructions included, and the ids of the prompt rendered
without them, so `count` can exceed `len(tokens)` by what the instructions take and nothing of them is
shown."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from switchyard.libs.bus import BusError
from switchyard.schemas import DetokenizeQuery, DetokenizeReply, ErrorCode, TokenizeQuery, TokenizeReply, Work
from switchyard.services.context.prompt import ChatTemplate


@runtime_checkable
class TokenCodec(ChatTemplate, Protocol):
    """What tokenizing needs of `switchyard.libs.tokenizer.Tokenizer` beyond rendering."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...

    def id_to_token(self, token_id: int) -> str | None: ...


class Renders(Protocol):
    """The part of `Context` that gathers and renders a request's prompt."""

    async def render_for(self, work: Work, add_generation_prompt: bool) -> str: ...

    async def render_visible(self, work: Work, add_generation_prompt: bool) -> tuple[str, str | None]: ...


class Tokens:
    def __init__(
        self,
        context: Renders,
        codec_of: Callable[[str | None], Awaitable[ChatTemplate]],
        max_model_len: int,
        max_ids: int,
    ):
        self.context = context
        # The model's own tokenizer, by the model a query names (the default model's for none).
        self.codec_of = codec_of
        self.max_model_len = max_model_len
        # Ids carried back in one reply; more would not fit one bus message (a count alone has no bound).
        self.max_ids = max_ids

    async def codec(self, model: str | None) -> TokenCodec:
        codec = await self.codec_of(model)
        if not isinstance(codec, TokenCodec):
            raise BusError(ErrorCode.bad_request, f"model {model!r} has no tokenizer here")
        return codec

    async def tokenize(self, q: TokenizeQuery) -> TokenizeReply:
        codec = await self.codec(q.model)
        if q.prompt is not None:
            text = q.prompt
        else:
            work = Work(
                rid="tokenize",
                tenant=q.tenant,
                user=q.user,
                key_id="",
                text=q.text,
                messages=q.messages,
                system=q.system,
                model=q.model,
                client_tools=q.client_tools,
                tool_choice=q.tool_choice,
                prefill=q.prefill,
            )
            text, visible = await self.context.render_visible(work, q.add_generation_prompt)
            if visible is not None and not q.operator_view:
                # The tenant's instructions are the operator's: counted, as the engine is sent them, never shown.
                return await self._reply(q, codec, await asyncio.to_thread(codec.encode, text), visible)
        return await self._reply(q, codec, await asyncio.to_thread(codec.encode, text))

    async def _reply(
        self, q: TokenizeQuery, codec: TokenCodec, ids: list[int], shown: str | None = None
    ) -> TokenizeReply:
        """The count of `ids`; the ids themselves where asked for: those of `shown` when given (the prompt
        without what the asker may not read), else `ids`."""
        reply = TokenizeReply(count=len(ids), max_model_len=self.max_model_len)
        if q.ids and shown is not None:
            ids = await asyncio.to_thread(codec.encode, shown)
        if q.ids:
            if len(ids) > self.max_ids:
                raise BusError(
                    ErrorCode.payload_too_large,
                    f"the prompt is {len(ids)} tokens; at most {self.max_ids} token ids are returned at once",
                )
            reply.tokens = ids
            if q.token_strs:
                reply.token_strs = [codec.id_to_token(i) or "" for i in ids]
        return reply

    async def detokenize(self, q: DetokenizeQuery) -> DetokenizeReply:
        codec = await self.codec(q.model)
        unknown = next((i for i in q.tokens if i < 0 or codec.id_to_token(i) is None), None)
        if unknown is not None:
            raise BusError(ErrorCode.bad_request, f"token id {unknown} is not in the model's vocabulary")
        return DetokenizeReply(prompt=await asyncio.to_thread(codec.decode, q.tokens))
