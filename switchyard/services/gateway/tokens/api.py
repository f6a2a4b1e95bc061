"""Token counting: vLLM's `POST /tokenize` and `POST /detokenize`, and Anthropic's `POST
/v1/messages/count_tokens`. The context service renders the prompt (the one renderer: system block with
tools, tenant instructions and saved memory, then history, the new message and the chat template) and
encodes it with the engine's tokenizer, so a count is what the model would be sent for the same request."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import (
    ChatMessage,
    DetokenizeQuery,
    DetokenizeReply,
    ErrorCode,
    TokenizeQuery,
    TokenizeReply,
    subjects,
)
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.chat_completions.request import OpenAIMessage, split_messages, take_prefill
from switchyard.services.gateway.core import Gateway, Gw, check_input_budget, check_text, request_id, resolve_model
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.key_policy import check_key_model
from switchyard.services.gateway.messages.request import AnthropicMessage, Block
from switchyard.services.gateway.messages.request import content_text as anthropic_text
from switchyard.services.gateway.messages.request import split_messages as split_anthropic_messages
from switchyard.services.gateway.messages.request import take_prefill as take_anthropic_prefill
from switchyard.services.gateway.messages.tools import AnthropicTool, AnthropicToolChoice, pipeline_choice, tool_specs
from switchyard.services.gateway.params import Strict, refuse_unsupported
from switchyard.services.gateway.runs.admit import limited
from switchyard.services.gateway.tool_calls import ToolDef, specs

router = APIRouter()
# Token ids fit 32 bits in every tokenizer we load; a larger number is refused here, not by the tokenizer.
TokenId = Annotated[int, Field(ge=0, lt=2**31)]


class TokenizeRequest(Strict):
    """vLLM's two shapes in one: `prompt` (TokenizeCompletionRequest) or `messages` (TokenizeChatRequest)."""

    # Tokens are always those the engine is given: the model's own rule for a leading BOS applies.
    IGNORED = frozenset({"add_special_tokens"})
    model: str | None = None
    prompt: str | None = None
    messages: list[OpenAIMessage] | None = Field(None, min_length=1)
    # vLLM's: None is a generation prompt unless the final message is continued; both true is a 400.
    add_generation_prompt: bool | None = Field(None, strict=True)
    continue_final_message: bool = Field(False, strict=True)
    tools: list[ToolDef] | None = None
    return_token_strs: bool = Field(False, strict=True)


class DetokenizeRequest(Strict):
    model: str | None = None
    tokens: list[TokenId]


class CountTokensRequest(Strict):
    """Anthropic's `messages.count_tokens` body: a `/v1/messages` body without the sampling parameters."""

    model: str = Field(min_length=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    # Counted as Anthropic counts it: the prompt, before any thinking.
    thinking: dict[str, Any] | None = None


async def tokenize_on_bus(gw: Gateway, request: Request, key: ApiKey, query: TokenizeQuery) -> TokenizeReply:
    async with limited(gw, key, request_id(request)):
        try:
            return await gw.bus.request(
                subjects.TOKENIZE, query, TokenizeReply, timeout=gw.settings.request_timeout_s, tenant=key.tenant
            )
        except PydanticSerializationError as e:  # JSON carries lone surrogates ("\ud800"); UTF-8 cannot
            raise ApiError(ErrorCode.bad_request, "the request holds text that is not valid Unicode") from e


def chat_query(
    gw: Gateway,
    key: ApiKey,
    model: str | None,
    text: str,
    earlier: list[ChatMessage],
    system: str | None,
    prefill: str | None = None,
) -> TokenizeQuery:
    """The same checks and the same fields a chat request of these messages would have."""
    check_text(gw.settings, text, "the last user message")
    started = [] if prefill is None else [ChatMessage(role="assistant", content=check_text(gw.settings, prefill))]
    check_input_budget(gw.settings, text, system, [*earlier, *started])
    return TokenizeQuery(
        tenant=key.tenant, user=key.user, model=model, text=text, messages=earlier, system=system, prefill=prefill
    )


def check_prompt(gw: Gateway, prompt: str) -> None:
    """Any text is a prompt here, blank or empty included, within the request's input budget."""
    if len(prompt) > gw.settings.max_input_chars:
        raise ApiError(ErrorCode.payload_too_large, f"prompt is over {gw.settings.max_input_chars} characters")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(ErrorCode.bad_request, "prompt is not valid Unicode (lone surrogate)") from e


class Tokenized(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None  # only with return_token_strs


class Detokenized(BaseModel):
    prompt: str


class TokenCount(BaseModel):
    """Anthropic's count_tokens answer."""

    input_tokens: int


@router.post("/tokenize", response_model=None, responses=route_docs.body(Tokenized))
async def tokenize(
    request: Request, gw: Gw, key: Principal, body: Annotated[TokenizeRequest, json_body(TokenizeRequest)]
) -> dict[str, Any]:
    refuse_unsupported(body)
    model, _ = resolve_model(gw.settings, body.model)
    check_key_model(key, gw.settings.registry, model)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError(ErrorCode.bad_request, "send either prompt or messages")
    if body.prompt is not None:
        if body.tools or body.continue_final_message:
            what = "tools go" if body.tools else "continue_final_message goes"
            raise ApiError(ErrorCode.bad_request, f"{what} with messages, not with a prompt")
        check_prompt(gw, body.prompt)
        query = TokenizeQuery(tenant=key.tenant, user=key.user, model=model, prompt=body.prompt)
    else:
        assert body.messages is not None
        messages, prefill, generation_prompt = take_prefill(
            body.messages, body.continue_final_message, body.add_generation_prompt
        )
        system, earlier, text = split_messages(messages)
        query = chat_query(gw, key, model, text, earlier, system, prefill)
        query.client_tools = specs(body.tools)
        query.add_generation_prompt = generation_prompt
    query.token_strs = body.return_token_strs
    query.operator_view = key.admin
    reply = await tokenize_on_bus(gw, request, key, query)
    out: dict[str, Any] = {"count": reply.count, "max_model_len": reply.max_model_len, "tokens": reply.tokens}
    if body.return_token_strs:
        out["token_strs"] = reply.token_strs
    return out


@router.post("/detokenize", response_model=None, responses=route_docs.body(Detokenized))
async def detokenize(
    request: Request, gw: Gw, key: Principal, body: Annotated[DetokenizeRequest, json_body(DetokenizeRequest)]
) -> dict[str, Any]:
    refuse_unsupported(body)
    model, _ = resolve_model(gw.settings, body.model)
    check_key_model(key, gw.settings.registry, model)
    if len(body.tokens) > gw.settings.max_detokenize_tokens:
        raise ApiError(
            ErrorCode.payload_too_large,
            f"tokens has {len(body.tokens)} ids; the limit is {gw.settings.max_detokenize_tokens}",
        )
    async with limited(gw, key, request_id(request)):
        reply = await gw.bus.request(
            subjects.DETOKENIZE,
            DetokenizeQuery(tenant=key.tenant, model=model, tokens=body.tokens),
            DetokenizeReply,
            timeout=gw.settings.request_timeout_s,
            tenant=key.tenant,
        )
    return {"prompt": reply.prompt}


@router.post("/v1/messages/count_tokens", response_model=None, responses=route_docs.body(TokenCount))
async def count_tokens(
    request: Request, gw: Gw, key: Principal, body: Annotated[CountTokensRequest, json_body(CountTokensRequest)]
) -> dict[str, Any]:
    refuse_unsupported(body)
    model, _ = resolve_model(gw.settings, body.model)
    check_key_model(key, gw.settings.registry, model)
    messages, prefill = take_anthropic_prefill(body.messages)
    earlier, text = split_anthropic_messages(messages)
    system = anthropic_text(body.system) if body.system is not None else None
    query = chat_query(gw, key, model, text, earlier, system or None, prefill)
    choice = pipeline_choice(body.tools, body.tool_choice)
    query.client_tools, query.tool_choice, query.ids = tool_specs(body.tools), choice, False
    reply = await tokenize_on_bus(gw, request, key, query)
    return {"input_tokens": reply.count}
