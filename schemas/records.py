"""Request records kept by the logger, and the operator console's queries over them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ADMIN_REQUESTS_LIST = "admin.requests.list"
# Feedback travels through JetStream like the stage records, so it survives a logger restart.
LOG_FEEDBACK = "log.feedback"
ADMIN_FEEDBACK_LIST = "admin.feedback.list"


class RequestSummary(BaseModel):
    """The filterable columns of one request's record."""

    rid: str
    tenant: str = ""
    status: str = "running"
    model: str | None = None
    api: str | None = None
    trace_id: str = ""
    created_ms: int = 0
    latency_ms: float | None = None
    ttft_ms: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    # Set on a replay: the rid of the request it re-ran.
    replay_of: str | None = None


class RequestListQuery(BaseModel):
    tenant: str | None = None
    status: str | None = None
    model: str | None = None
    replay_of: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = Field(50, ge=1, le=500)
    # Opaque; the `next_cursor` of the previous page (newest first).
    cursor: str | None = None


class RequestList(BaseModel):
    items: list[RequestSummary] = Field(default_factory=list)
    next_cursor: str | None = None


class Feedback(BaseModel):
    """A thumbs rating of one answer, or an A/B preference between two answers (`rid` won over `other_rid`)."""

    rid: str
    tenant: str
    user: str = ""
    kind: Literal["thumbs", "preference"] = "thumbs"
    # thumbs: +1 or -1; preference: +1 (rid preferred)
    value: int = Field(ge=-1, le=1)
    other_rid: str | None = None
    comment: str = Field("", max_length=2000)
    created_ms: int = 0


class FeedbackQuery(BaseModel):
    tenant: str | None = None
    rid: str | None = None
    limit: int = Field(100, ge=1, le=1000)


class FeedbackList(BaseModel):
    items: list[Feedback] = Field(default_factory=list)
