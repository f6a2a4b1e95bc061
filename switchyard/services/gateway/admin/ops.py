"""Operations: liveness, readiness of every stage, metrics, the model list, and request records."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from switchyard.libs.bus import BusError
from switchyard.libs.models import ModelCard
from switchyard.schemas import (
    ErrorCode,
    HealthReply,
    HealthRequest,
    RequestQuery,
    RequestRecordReply,
    SpanRecord,
    ToolSpecs,
    ToolSpecsQuery,
    subjects,
)
from switchyard.schemas.embeddings import EMBEDDING_DIM, EMBEDDING_MAX_TOKENS, EMBEDDING_MODEL, EMBEDDING_MODEL_ALIASES
from switchyard.services.gateway import route_docs
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import RidPath

router = APIRouter()
# Included by the app under the admin guard.
admin_router = APIRouter()


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    """`/readyz`: every stage's health probe; 503 with `missing` when one does not answer ok."""

    status: Literal["ready", "unavailable"]
    stages: dict[str, dict[str, Any]]
    missing: list[str] | None = None


@router.get("/healthz", response_model=Health)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(gw: Gw) -> JSONResponse:
    stages = [s for s in subjects.STAGES if s != "gateway"]

    async def probe(stage: str) -> dict[str, Any]:
        try:
            reply = await gw.bus.request(
                subjects.health(stage), HealthRequest(), HealthReply, timeout=gw.settings.readyz_timeout_s
            )
        except BusError as e:
            return {"ok": False, "detail": e.message}
        except Exception as e:  # a broken connection must read as "not ready", not as a crashed probe
            return {"ok": False, "detail": f"probe failed: {e}"}
        return {"ok": reply.ok, "replica": reply.replica, "detail": reply.detail}

    results = dict(zip(stages, await asyncio.gather(*(probe(s) for s in stages)), strict=True))
    missing = [s for s, r in results.items() if not r["ok"]]
    if missing:
        return JSONResponse({"status": "unavailable", "missing": missing, "stages": results}, status_code=503)
    return JSONResponse({"status": "ready", "stages": results})


@router.get("/metrics", response_class=Response, responses=route_docs.prometheus())
async def metrics(gw: Gw) -> Response:
    return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)


class ModelInfo(BaseModel):
    """OpenAI's model object and what it adds (kind, context length, capabilities, aliases...)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    kind: Literal["generation", "embedding"]
    context_length: int | None = None
    capabilities: dict[str, bool]
    aliases: list[str]


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelInfo]


class ToolList(BaseModel):
    object: Literal["list"]
    data: list[dict[str, Any]]  # {"type": "function", "function": the tool's JSON schema}


def model_json(card: ModelCard) -> dict[str, Any]:
    """OpenAI's model object, plus what a client needs to choose one: its kind, context length, capabilities,
    aliases."""
    return {
        "id": card.name,
        "object": "model",
        "created": 0,
        "owned_by": card.owner,
        "kind": "generation",
        "context_length": card.context_length,
        "capabilities": {c: card.can(c) for c in ("chat", "completion", "tools", "structured_outputs")},
        "chat_template": card.chat_template,
        "aliases": card.aliases,
        "fallback": card.fallback,
    }


def embedding_model_json() -> dict[str, Any]:
    """The sentence encoder `POST /v1/embeddings` serves (hosted by the tools stage, not an inference pool)."""
    return {
        "id": EMBEDDING_MODEL,
        "object": "model",
        "created": 0,
        "owned_by": "sentence-transformers",
        "kind": "embedding",
        "context_length": EMBEDDING_MAX_TOKENS,
        "dimensions": EMBEDDING_DIM,
        "capabilities": {"embeddings": True},
        "aliases": sorted(EMBEDDING_MODEL_ALIASES - {EMBEDDING_MODEL}),
    }


@router.get("/v1/models", response_model=None, responses=route_docs.body(ModelList))
async def models(gw: Gw, key: Principal) -> dict[str, Any]:
    """Every served model, as the live registry holds it now, and the embedding model."""
    data = [model_json(c) for c in gw.settings.registry.models]
    return {"object": "list", "data": [*data, embedding_model_json()]}


@router.get("/v1/models/{model_id:path}", response_model=None, responses=route_docs.body(ModelInfo))
async def model(model_id: str, gw: Gw, key: Principal) -> dict[str, Any]:
    if model_id in EMBEDDING_MODEL_ALIASES:
        return embedding_model_json()
    card = gw.settings.registry.find(model_id[:256])
    if card is None:
        raise ApiError(ErrorCode.not_found, f"model {model_id[:80]!r} does not exist; GET /v1/models lists them")
    return model_json(card)


@router.get("/v1/tools", response_model=None, responses=route_docs.body(ToolList))
async def tools(gw: Gw, key: Principal) -> dict[str, Any]:
    """The server-side tools the pipeline runs before the model writes (asked of the tools stage)."""
    reply = await gw.bus.request(subjects.TOOLS_SPECS, ToolSpecsQuery(tenant=key.tenant), ToolSpecs, timeout=3.0)
    return {"object": "list", "data": [{"type": "function", "function": t} for t in reply.tools]}


def span_tree(spans: list[SpanRecord]) -> list[dict[str, Any]]:
    """Spans nested by parent; a span whose parent is absent (another trace, or not logged) is a root."""
    nodes = {s.span_id: {**s.model_dump(mode="json"), "children": []} for s in spans}
    roots: list[dict[str, Any]] = []
    for s in sorted(spans, key=lambda s: s.start_ns):
        node = nodes[s.span_id]
        parent = nodes.get(s.parent_id) if s.parent_id else None
        if parent is not None and parent is not node:
            parent["children"].append(node)
        else:
            roots.append(node)
    return roots


class RequestDetail(BaseModel):
    """One request as the log service holds it: its record, its spans, and the spans as a tree."""

    rid: str
    record: dict[str, Any]
    spans: list[dict[str, Any]]
    tree: list[dict[str, Any]]


@admin_router.get("/v1/admin/requests/{rid}", response_model=RequestDetail)
async def admin_request(rid: RidPath, gw: Gw) -> JSONResponse:
    reply = await gw.bus.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
    return JSONResponse(
        {
            "rid": reply.rid,
            "record": reply.record,
            "spans": [s.model_dump(mode="json") for s in reply.spans],
            "tree": span_tree(reply.spans),
        }
    )
