"""Request records kept by the logger, and the operator console's queries over them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

ADMIN_REQUESTS_LIST = "admin.requests.list"
# Dashboard aggregates over a window, bucketed.
ADMIN_STATS = "admin.requests.stats"
# Full records a page at a time (datasets); preference pairs joined with both answers.
ADMIN_REQUESTS_EXPORT = "admin.requests.export"
ADMIN_PREFERENCES_EXPORT = "admin.preferences.export"
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
    mode: str | None = None
    # The worst input-safety action ("allow", "flag", "block"); "block" also when output safety stopped it.
    safety_action: str | None = None
    trace_id: str = ""
    created_ms: int = 0
    latency_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    # Set on a replay: the rid of the request it re-ran.
    replay_of: str | None = None


class RequestListQuery(BaseModel):
    tenant: str | None = None
    status: str | None = None
    model: str | None = None
    api: str | None = None
    mode: str | None = None
    safety_action: str | None = None
    replay_of: str | None = None
    # True: only replays; False: only originals; None: both.
    replays: bool | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = Field(50, ge=1, le=500)
    # Opaque; the `next_cursor` of the previous page (newest first).
    cursor: str | None = None


class RequestList(BaseModel):
    items: list[RequestSummary] = Field(default_factory=list)
    next_cursor: str | None = None


class RequestExport(BaseModel):
    """A page of dataset rows (see `libs.store.records.dataset_row`)."""

    items: list[dict[str, Any]] = Field(default_factory=list)
    next_cursor: str | None = None


class StatsQuery(BaseModel):
    window_s: int = Field(3600, ge=60, le=30 * 24 * 3600)
    # None: about 60 buckets over the window, at least a minute each.
    bucket_s: int | None = Field(None, ge=1)
    tenant: str | None = None
    # Replays are excluded unless asked for: they would double-count the traffic they re-run.
    include_replays: bool = False
    until_ms: int | None = None


class StatsBucket(BaseModel):
    start_ms: int
    requests: int = 0
    errors: int = 0
    blocks: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # cached / prompt tokens: the share of prompt tokens served from the prefix cache.
    cache_hit_rate: float | None = None


class Stats(BaseModel):
    since_ms: int
    until_ms: int
    window_s: int
    bucket_s: int
    total: StatsBucket
    buckets: list[StatsBucket] = Field(default_factory=list)
    requests_per_minute: float = 0.0


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
    kind: Literal["thumbs", "preference"] | None = None
    limit: int = Field(100, ge=1, le=1000)


class FeedbackList(BaseModel):
    items: list[Feedback] = Field(default_factory=list)


class PreferencePair(BaseModel):
    """One preference as a training pair: the prompt both answers saw, the chosen and the rejected answer."""

    tenant: str
    user: str = ""
    chosen_rid: str
    rejected_rid: str
    prompt: str = ""
    text: str = ""
    chosen: str = ""
    rejected: str = ""
    created_ms: int = 0


class PreferenceQuery(BaseModel):
    tenant: str | None = None
    limit: int = Field(200, ge=1, le=1000)
    # Opaque; the `next_cursor` of the previous page.
    cursor: str | None = None


class PreferenceList(BaseModel):
    items: list[PreferencePair] = Field(default_factory=list)
    next_cursor: str | None = None


class ReplayOverrides(BaseModel):
    model: str | None = None
    mode: Literal["fast", "reasoning"] | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1, le=8192)
    seed: int | None = None


class ReplayRequest(BaseModel):
    mode: Literal["inference", "pipeline"] = "inference"
    overrides: ReplayOverrides = Field(default_factory=ReplayOverrides)


class DiffSegment(BaseModel):
    op: Literal["equal", "replace", "delete", "insert"]
    a: str = ""
    b: str = ""


class ReplayResult(BaseModel):
    rid: str
    replay_of: str
    mode: Literal["inference", "pipeline"]
    overrides: dict[str, Any] = Field(default_factory=dict)
    status: str
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    output: str = ""
    original_output: str = ""
    # Token for token: the raw model output of the replay equals the original's.
    matched: bool
    # Unified diff (one word per line) and word-level segments; empty when matched.
    diff: str = ""
    segments: list[DiffSegment] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict)
    original_usage: dict[str, Any] = Field(default_factory=dict)
    duration_ms: float = 0.0
