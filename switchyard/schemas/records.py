"""Request records kept by the logger, and the operator console's queries over them.

Each stage publishes its part of a request's record as a typed `StagePart` on its `StageRecord`; the
logger merges the parts into one stored record, which readers validate as a `RequestRecord`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from switchyard.schemas.mcp import McpCall, McpToolRan
from switchyard.schemas.messages import (
    ChatMessage,
    Forward,
    RouteDecision,
    SafetyVerdict,
    Sampling,
    StageRecord,
    ToolEvent,
    Usage,
    Work,
)
from switchyard.schemas.safety import StrikePolicy


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
    """A page of dataset rows (see `switchyard.libs.store.records.dataset_row`)."""

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


# ---- stage parts -------------------------------------------------------------------------------


class OnlySet(BaseModel):
    """Dumps only the fields that were set: a part says what its stage knew, and a field a stage left
    unset must not overwrite another stage's value in the merged record."""

    @model_serializer(mode="wrap")
    def _only_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        keep = self.model_fields_set | {"kind"}
        return {k: v for k, v in data.items() if k in keep}


class FileVerdict(SafetyVerdict):
    """A verdict on an attached file, naming the file."""

    file_id: str


class ContextPart(OnlySet):
    kind: Literal["context"] = "context"
    prompt: str = ""
    chat_id: str | None = None
    # The rendered prompt's length; a replay reuses it when the request never reached inference.
    prompt_tokens: int | None = None
    file_verdicts: list[FileVerdict] = Field(default_factory=list)


class SafetyInPart(OnlySet):
    kind: Literal["safety_in"] = "safety_in"
    safety_in: list[SafetyVerdict] = Field(default_factory=list)
    safety_action: str | None = None
    # The tenant's strike policy when the request was judged (the abuse monitor reads it).
    strikes: StrikePolicy | None = None


class RoutePart(OnlySet):
    kind: Literal["router"] = "router"
    route: RouteDecision | None = None


class ToolsPart(OnlySet):
    kind: Literal["tools"] = "tools"
    tools: list[ToolEvent] = Field(default_factory=list)
    # The prompt with the tool results in it (replaces the context stage's).
    prompt: str = ""
    tool_verdicts: list[SafetyVerdict] = Field(default_factory=list)
    # The calls that went to a registered MCP server: which server, how long, how many bytes came back.
    mcp: list[McpCall] = Field(default_factory=list)


class InferencePart(OnlySet):
    kind: Literal["inference"] = "inference"
    model: str | None = None
    replica: str = ""
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    sampling: Sampling = Field(default_factory=Sampling)
    prompt_tokens: int = 0
    # The model's answer before output safety touched it.
    raw_output: str = ""
    thinking: str = ""
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    # The MCP calls the model wrote itself, in order, and (set only then) the last turn's prompt, with
    # those calls and their results in it: what an inference replay starts from.
    mcp_rounds: list[McpToolRan] = Field(default_factory=list)
    prompt: str = ""


class SafetyOutcome(BaseModel):
    redactions: list[dict[str, Any]] = Field(default_factory=list)
    final_check: list[dict[str, Any]] = Field(default_factory=list)
    # The category that stopped the answer; None when nothing did.
    blocked: str | None = None
    answer_release: str = "stream"


class SafetyOutPart(OnlySet):
    kind: Literal["safety_out"] = "safety_out"
    status: str | None = None
    finish_reason: str | None = None
    output: str = ""
    # What the client was shown (empty when the answer was held back and never admitted).
    released: str = ""
    thinking: str = ""
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None
    mode: str | None = None
    safety_out: SafetyOutcome = Field(default_factory=SafetyOutcome)


class LoggedRequest(OnlySet):
    """The client's request as the gateway read it (empty when it never got that far)."""

    text: str = ""
    chat_id: str | None = None
    model: str | None = None
    mode: str | None = None
    prompt_mode: str = "chat"
    system: str | None = None
    messages: list[ChatMessage] = Field(default_factory=list)
    sampling: Sampling = Field(default_factory=Sampling)
    user: str = ""

    @classmethod
    def of(cls, work: Work) -> LoggedRequest:
        # Every field is the `Work` field of that name, and every one is set (so every one is logged).
        return cls(**{name: getattr(work, name) for name in cls.model_fields})


class GatewayOutcome(BaseModel):
    """What only the gateway saw; kept apart so it never overwrites what the answering stages report."""

    route: str = ""
    cancel_reason: str | None = None
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    events: int = 0
    first_event_ms: float | None = None


class GatewayPart(OnlySet):
    kind: Literal["gateway"] = "gateway"
    api: str = ""
    request: LoggedRequest = Field(default_factory=LoggedRequest)
    client_status: str = ""
    key_id: str | None = None
    gateway: GatewayOutcome = Field(default_factory=GatewayOutcome)


class EmbeddingsPart(OnlySet):
    """The gateway's part of an embeddings request's record. No other stage reports on one, so this part
    also says how it ended (`status`), which model served it and what it used."""

    kind: Literal["embeddings"] = "embeddings"
    api: Literal["embeddings"] = "embeddings"
    # The inputs, one user message each (so they are scrubbed like any other text).
    request: LoggedRequest = Field(default_factory=LoggedRequest)
    client_status: str = ""
    key_id: str | None = None
    status: str | None = None
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    gateway: GatewayOutcome = Field(default_factory=GatewayOutcome)


class ReplayPart(OnlySet):
    """The gateway's part of a replay's record."""

    kind: Literal["replay"] = "replay"
    api: Literal["replay"]
    replay_of: str = ""
    replay_mode: str = ""
    overrides: dict[str, Any] = Field(default_factory=dict)
    request: LoggedRequest = Field(default_factory=LoggedRequest)
    client_status: str = ""
    # Not `key_id`: abuse detection counts blocked requests per key, and an operator replaying a
    # blocked request is not the one who sent it.
    replayed_by: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    events: int = 0


StagePart = Annotated[
    ContextPart
    | SafetyInPart
    | RoutePart
    | ToolsPart
    | InferencePart
    | SafetyOutPart
    | GatewayPart
    | ReplayPart
    | EmbeddingsPart,
    Field(discriminator="kind"),
]

# `StageRecord` and `Forward` (in messages.py) carry a part; the parts are built from message models.
StageRecord.model_rebuild(_types_namespace={"StagePart": StagePart})
Forward.model_rebuild(_types_namespace={"StagePart": StagePart})


# ---- the merged record -------------------------------------------------------------------------


class StageEntry(BaseModel):
    """One stage's timing, status and free-form decision in the merged record."""

    replica: str = ""
    started_ms: int = 0
    duration_ms: float = 0.0
    status: str = "ok"
    decision: dict[str, Any] = Field(default_factory=dict)
    error: dict[str, Any] | None = None


class TextDigest(BaseModel):
    """Raw text a record no longer holds (an opted-out tenant, or past retention): its hash and length."""

    sha256: str
    chars: int


# Text in a stored record: as written, or its digest once scrubbed.
Text = str | TextDigest


class RecordedRequest(BaseModel):
    """The gateway's `request` as stored (`LoggedRequest`, its text possibly scrubbed)."""

    model_config = ConfigDict(extra="allow")

    text: Text = ""
    chat_id: str | None = None
    model: str | None = None
    mode: str | None = None
    prompt_mode: str = "chat"
    system: Text | None = None
    # Each `ChatMessage`, its content possibly a digest.
    messages: list[dict[str, Any]] = Field(default_factory=list)
    sampling: Sampling | None = None
    user: str = ""


class RequestRecord(BaseModel):
    """A stored request record as readers see it: every stage's part merged, each field optional (a
    record is written while its request runs, and a stage may never have been reached). The lists whose
    text scrubbing rewrites (`tools`, `safety_in`, `tool_verdicts`, `file_verdicts`) and `feedback`
    stay as stored, as extra fields."""

    model_config = ConfigDict(extra="allow")

    rid: str = ""
    tenant: str = ""
    trace_id: str = ""
    stages: dict[str, StageEntry] = Field(default_factory=dict)
    # Which stage wrote each top-level field.
    sources: dict[str, str] = Field(default_factory=dict)
    error: dict[str, Any] | None = None
    # gateway
    api: str | None = None
    request: RecordedRequest | None = None
    client_status: str | None = None
    key_id: str | None = None
    gateway: GatewayOutcome | None = None
    replay_of: str | None = None
    replay_mode: str | None = None
    overrides: dict[str, Any] | None = None
    replayed_by: str | None = None
    events: int | None = None
    # context and tools
    prompt: Text | None = None
    mcp: list[McpCall] | None = None
    chat_id: str | None = None
    # safety_in
    safety_action: str | None = None
    strikes: StrikePolicy | None = None
    # router
    route: RouteDecision | None = None
    # inference and safety_out
    model: str | None = None
    mode: str | None = None
    replica: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    sampling: Sampling | None = None
    prompt_tokens: int | None = None
    raw_output: Text | None = None
    thinking: Text | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    status: str | None = None
    output: Text | None = None
    released: Text | None = None
    safety_out: SafetyOutcome | None = None
