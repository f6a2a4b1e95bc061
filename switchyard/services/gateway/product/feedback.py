"""Feedback (any key): thumbs on one answer, and A/B preferences between two answers.

Ratings go to JetStream `log.feedback`, so they are kept even while the logger is down, and the logger
stores them beside the request records. A key may rate only its own tenant's requests: another tenant's
rid is looked up exactly as one that does not exist, and answered alike (404).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from switchyard.libs.bus import BusError
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import ErrorCode, Feedback, RequestQuery, RequestRecord, RequestRecordReply, subjects
from switchyard.schemas.subjects import LOG_FEEDBACK
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gateway, Gw
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import Id

router = APIRouter()
# The logger writes a request's record a moment after `done`: a rating sent at once waits this long for it.
RECORD_WAIT_S = 3.0
# A rating is a few short fields (the app's body limit for these routes).
MAX_BODY_BYTES = 16_000


class ThumbsBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rid: Id
    rating: Literal["up", "down"]
    comment: str = Field("", max_length=2000)


class PreferenceBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rid_a: Id
    rid_b: Id
    chosen: Literal["a", "b"]
    comment: str = Field("", max_length=2000)


async def own_request(gw: Gateway, key: ApiKey, rid: str) -> None:
    """404 unless `rid` is a logged request of the key's tenant. The tenant is part of the lookup, so another
    tenant's request and one that does not exist are the same miss: the same query, the same wait for a
    record still being written, the same answer (nothing tells a key that someone else's rid exists)."""
    query = RequestQuery(rid=rid, tenant=key.tenant)
    deadline = time.monotonic() + RECORD_WAIT_S
    while True:
        try:
            reply = await gw.bus.request(subjects.ADMIN_REQUEST_GET, query, RequestRecordReply)
            # A logger that predates tenant lookups answers any tenant's: then that is a miss too.
            if RequestRecord.model_validate(reply.record).tenant == key.tenant:
                return
        except BusError as e:
            if e.code != ErrorCode.not_found:
                raise
        if time.monotonic() >= deadline:
            raise ApiError(ErrorCode.not_found, f"request {rid!r} not found")
        await asyncio.sleep(0.2)


async def publish(gw: Gateway, fb: Feedback) -> None:
    try:
        await gw.bus.publish_durable(LOG_FEEDBACK, fb, f"fb:{uuid.uuid4().hex}")
    except Exception as e:
        raise ApiError(ErrorCode.unavailable, f"feedback not stored: {e}") from e


class ThumbsStored(BaseModel):
    rid: str
    rating: Literal["up", "down"]
    stored: bool


class PreferenceStored(BaseModel):
    chosen: str
    rejected: str
    stored: bool


@router.post("/v1/feedback", status_code=202, response_model=ThumbsStored)
async def thumbs(gw: Gw, key: Principal, body: Annotated[ThumbsBody, json_body(ThumbsBody)]) -> JSONResponse:
    await own_request(gw, key, body.rid)
    fb = Feedback(
        rid=body.rid,
        tenant=key.tenant,
        user=key.user,
        kind="thumbs",
        value=1 if body.rating == "up" else -1,
        comment=body.comment,
        created_ms=now_ms(),
    )
    await publish(gw, fb)
    return JSONResponse({"rid": body.rid, "rating": body.rating, "stored": True}, status_code=202)


@router.post("/v1/feedback/preference", status_code=202, response_model=PreferenceStored)
async def preference(
    gw: Gw, key: Principal, body: Annotated[PreferenceBody, json_body(PreferenceBody)]
) -> JSONResponse:
    if body.rid_a == body.rid_b:
        raise ApiError(ErrorCode.bad_request, "rid_a and rid_b must be two different requests")
    # Both looked up at once, the answer named in order (rid_a's miss first): which lookup happens to fail
    # first must not change what the client reads.
    looked = await asyncio.gather(
        own_request(gw, key, body.rid_a), own_request(gw, key, body.rid_b), return_exceptions=True
    )
    for outcome in looked:
        if isinstance(outcome, BaseException):
            raise outcome
    chosen, rejected = (body.rid_a, body.rid_b) if body.chosen == "a" else (body.rid_b, body.rid_a)
    fb = Feedback(
        rid=chosen,
        tenant=key.tenant,
        user=key.user,
        kind="preference",
        value=1,
        other_rid=rejected,
        comment=body.comment,
        created_ms=now_ms(),
    )
    await publish(gw, fb)
    return JSONResponse({"chosen": chosen, "rejected": rejected, "stored": True}, status_code=202)
