"""`POST /v1/embeddings`, OpenAI's shape, served by the sentence encoder the tools service hosts (asked over
`subjects.EMBEDDINGS`): the key, its rate limits (requests, streams and tokens) and a request record, as for
a chat request."""

from __future__ import annotations

import base64
import time
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel, Field

from switchyard.libs.bus import BusError
from switchyard.libs.bus import headers as H
from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import (
    ChatMessage,
    EmbeddingsPart,
    EmbedReply,
    EmbedRequest,
    ErrorCode,
    GatewayOutcome,
    LoggedRequest,
    StageRecord,
    Usage,
    subjects,
)
from switchyard.schemas.embeddings import EMBEDDING_DIM, EMBEDDING_MODEL, EMBEDDING_MODEL_ALIASES
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw, _parent_context, request_id
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict, refuse_unsupported
from switchyard.services.gateway.runs.admit import limited
from switchyard.services.gateway.settings import GatewaySettings

router = APIRouter()
ROUTE = "POST /v1/embeddings"


class EmbeddingsRequest(Strict):
    # OpenAI's end-user id: the key already names who asks.
    IGNORED = frozenset({"user"})
    model: str = Field(min_length=1)
    # Token-id arrays are typed here so they are refused by name, not as a shapeless validation error.
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


def texts_of(settings: GatewaySettings, value: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    """The inputs as texts, each within the limits, or 400/413 naming the one that is not."""
    items: list[Any] = [value] if isinstance(value, str) else list(value)
    if not items:
        raise ApiError(ErrorCode.bad_request, "input is empty: send a string or a list of strings")
    if not all(isinstance(t, str) for t in items):
        raise ApiError(
            ErrorCode.bad_request,
            f"input as token ids is not served: {EMBEDDING_MODEL} has its own vocabulary; send text",
        )
    if len(items) > settings.embeddings_max_inputs:
        raise ApiError(
            ErrorCode.payload_too_large,
            f"input has {len(items)} items; the limit is {settings.embeddings_max_inputs}",
        )
    total = 0
    for i, text in enumerate(items):
        if not text.strip():
            raise ApiError(ErrorCode.bad_request, f"input[{i}] is empty")
        if len(text) > settings.embeddings_max_input_chars:
            raise ApiError(
                ErrorCode.payload_too_large,
                f"input[{i}] is over {settings.embeddings_max_input_chars} characters",
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ApiError(ErrorCode.bad_request, f"input[{i}] is not valid Unicode (lone surrogate)") from e
        total += len(text)
    if total > settings.embeddings_max_total_chars:
        raise ApiError(
            ErrorCode.payload_too_large,
            f"input holds {total} characters; the limit is {settings.embeddings_max_total_chars}",
        )
    return items


def check_model(settings: GatewaySettings, name: str, dimensions: int | None) -> None:
    if name not in EMBEDDING_MODEL_ALIASES:
        if name.partition(":")[0] in settings.models:
            raise ApiError(
                ErrorCode.bad_request, f"model {name!r} is a chat model; embeddings are served by {EMBEDDING_MODEL!r}"
            )
        raise ApiError(ErrorCode.not_found, f"model {name!r} does not exist; GET /v1/models lists them")
    if dimensions is not None and dimensions != EMBEDDING_DIM:
        raise ApiError(
            ErrorCode.bad_request,
            f"dimensions={dimensions} is not served: {EMBEDDING_MODEL} gives {EMBEDDING_DIM}-dimensional vectors only",
        )


def response_body(reply: EmbedReply, count: int, encoding: str) -> dict[str, Any]:
    raw = base64.b64decode(reply.vectors)
    rows = np.frombuffer(raw, dtype="<f4").reshape(count, reply.dim)
    data = [
        {
            "object": "embedding",
            "index": i,
            # base64: each row's own little-endian float32 bytes, which the SDK decodes with numpy.
            "embedding": base64.b64encode(row.tobytes()).decode("ascii") if encoding == "base64" else row.tolist(),
        }
        for i, row in enumerate(rows)
    ]
    tokens = sum(reply.tokens)
    return {
        "object": "list",
        "data": data,
        "model": reply.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def record(
    gw: Gateway,
    key: ApiKey,
    rid: str,
    texts: list[str],
    started: tuple[int, float],
    *,
    usage: Usage | None = None,
    error: BusError | None = None,
) -> None:
    """The request's record: nothing but the gateway reports on it, so its one part says how it ended."""
    started_ms, t0 = started
    status = "error" if error is not None else "complete"
    inputs = [ChatMessage(role="user", content=t) for t in texts]
    part = EmbeddingsPart(
        api="embeddings",  # set, so it is recorded (a part dumps only the fields set)
        request=LoggedRequest(model=EMBEDDING_MODEL, user=key.user, messages=inputs),
        client_status=status,
        key_id=key.id,
        status=status,
        model=EMBEDDING_MODEL,
        usage=usage or Usage(),
        gateway=GatewayOutcome(route=ROUTE, usage=usage or Usage()),
    )
    await gw.bus.log_stage(
        StageRecord(
            rid=rid,
            stage="gateway",
            tenant=key.tenant,
            started_ms=started_ms,
            duration_ms=(time.perf_counter() - t0) * 1000,
            status="error" if error is not None else "ok",
            error=error.info() if error is not None else None,
            part=part,
        )
    )


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # a string with encoding_format=base64


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@router.post("/v1/embeddings", response_model=None, responses=route_docs.body(EmbeddingList))
async def embeddings(
    request: Request, gw: Gw, key: Principal, body: Annotated[EmbeddingsRequest, json_body(EmbeddingsRequest)]
) -> dict[str, Any]:
    refuse_unsupported(body)
    check_model(gw.settings, body.model, body.dimensions)
    texts = texts_of(gw.settings, body.input)
    rid = request_id(request)
    started = (H.now_ms(), time.perf_counter())
    attributes = {"switchyard.rid": rid, "switchyard.tenant": key.tenant, "switchyard.api": "embeddings"}
    with gw.bus.tracer.start_as_current_span(
        ROUTE, context=_parent_context(request), kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        async with limited(gw, key, rid, model=EMBEDDING_MODEL) as debit:  # its name after the aliases
            try:
                reply = await gw.bus.request(
                    subjects.EMBEDDINGS,
                    EmbedRequest(tenant=key.tenant, texts=texts),
                    EmbedReply,
                    timeout=gw.settings.request_timeout_s,
                    rid=rid,
                    tenant=key.tenant,
                )
            except BusError as e:
                span.set_status(Status(StatusCode.ERROR, e.message))
                await record(gw, key, rid, texts, started, error=e)
                raise
            debit.tokens = sum(reply.tokens)
        span.set_attribute("gen_ai.usage.input_tokens", debit.tokens)
        await record(gw, key, rid, texts, started, usage=Usage(prompt_tokens=debit.tokens))
    return response_body(reply, len(texts), body.encoding_format)
