"""Every message that crosses the bus.

A request travels as one `Work` envelope: each stage reads it, adds its own part (prompt, verdicts,
route, tool results) and forwards it, so the record of a request is the envelope's history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from switchyard.schemas.errors import ErrorInfo
from switchyard.schemas.plan import RequestPlan, ThinkingAsk
from switchyard.schemas.safety import TenantSafety

if TYPE_CHECKING:
    # The parts are built from the models here; records.py resolves this name once it has them.
    from switchyard.schemas.records import StagePart

Role = Literal["system", "user", "assistant", "tool"]
Mode = Literal["fast", "reasoning"]
Api = Literal["chat", "openai", "anthropic", "replay"]
TurnStatus = Literal["complete", "stopped", "error"]
FinishReason = Literal["stop", "length", "cancelled", "error", "blocked"]
# 'chat': the context stage renders history, system and message with the model's chat template; 'raw':
# the text is the whole prompt, passed to the engine verbatim (OpenAI's legacy /v1/completions).
PromptMode = Literal["chat", "raw"]


class ChatMessage(BaseModel):
    role: Role
    content: str


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] = Field(default_factory=list)


class TokenLogprob(BaseModel):
    """One answer token's log probability under the model (before penalties, bias and grammar), with the
    most likely alternatives at its position; OpenAI's `logprobs.content` item."""

    token: str
    logprob: float
    bytes: list[int] = Field(default_factory=list)
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ResponseFormat(BaseModel):
    """What the answer must spell, enforced token by token (the engine's grammar-constrained decoding):
    any JSON object, JSON valid against `json_schema`, a match of `regex`, or one of `choices`."""

    type: Literal["json_object", "json_schema", "regex", "choice"]
    json_schema: dict[str, Any] | None = None
    regex: str | None = None
    choices: list[str] = Field(default_factory=list, max_length=256)


class Sampling(BaseModel):
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # 0: off
    # vLLM's min_p: drop tokens less likely than min_p times the most likely one (0: off).
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    # Always set by the gateway when the client leaves it open, so every logged request replays exactly.
    seed: int | None = None
    max_tokens: int = Field(256, ge=1, le=8192)
    stop: list[str] = Field(default_factory=list, max_length=8)
    # Decode past EOS to exactly max_tokens (vLLM's `ignore_eos`): benchmarks need a fixed output length.
    ignore_eos: bool = False
    # OpenAI's penalties on the output's tokens, vLLM's repetition_penalty (prompt and output, 1 is off),
    # and a bias added to chosen token ids' logits before sampling.
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0)
    logit_bias: dict[int, float] = Field(default_factory=dict, max_length=300)
    response_format: ResponseFormat | None = None
    # Log probabilities of the answer's tokens, with this many alternatives each (None: off).
    logprobs: int | None = Field(None, ge=0, le=20)


class Usage(BaseModel):
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    # Of completion_tokens, those spent thinking (OpenAI's reasoning_tokens): a thinking model's own or the
    # prompted thinking phase's.
    reasoning_tokens: int = 0
    ttft_ms: float | None = None
    tpot_ms: float | None = None


class SafetyVerdict(BaseModel):
    category: str
    score: float
    action: Literal["allow", "flag", "block"]
    classifier: str
    version: str
    detail: str = ""
    source: str = "user"
    # The classifier's block bar for this category and source: a flag below it was borderline. None for rules.
    block_at: float | None = None


class RouteDecision(BaseModel):
    model: str
    mode: Mode
    pool: str
    replica: str
    reason: str
    # The model the request asked for, when the router sent it to that model's configured fallback instead.
    fallback_from: str | None = None


class ToolEvent(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    status: Literal["running", "ok", "error", "timeout"]
    duration_ms: float = 0.0
    output: str = ""
    sources: list[str] = Field(default_factory=list)


class InputDecision(BaseModel):
    """safety_in's answer on `pipeline.safety_in` (request/reply); a block comes back as a
    `policy_violation` error instead."""

    rid: str
    action: Literal["allow", "flag", "block"] = "allow"
    verdicts: list[SafetyVerdict] = Field(default_factory=list)


class Work(BaseModel):
    """The request envelope handed from stage to stage."""

    rid: str
    tenant: str
    user: str
    key_id: str
    api: Api = "chat"
    chat_id: str | None = None
    text: str
    # Client-supplied earlier messages (OpenAI/Anthropic style), used when there is no stored chat.
    messages: list[ChatMessage] = Field(default_factory=list)
    system: str | None = None
    model: str | None = None
    mode: Mode | None = None
    prompt_mode: PromptMode = "chat"
    # The start of the answer, which the model continues (Anthropic's final assistant message, vLLM's
    # `continue_final_message`): the prompt ends inside that assistant message, and the answer does not repeat it.
    prefill: str | None = None
    # vLLM's `add_generation_prompt`: false ends the prompt after the last message, with no assistant header.
    add_generation_prompt: bool = True
    sampling: Sampling = Field(default_factory=Sampling)
    # What the client asked about thinking (reasoning_effort, Anthropic's thinking.budget_tokens).
    thinking: ThinkingAsk | None = None
    # The request plan (switchyard/libs/plan.py): set by the gateway before context renders; read, never rewritten.
    plan: RequestPlan | None = None
    created_ms: int = 0
    # The gateway replica relaying the answer: safety_out sends it the text on `chat.steps.<relay>.<self>`,
    # one message per pass for all its streams. None (an older sender, a test): on `chat.events.<rid>.direct`.
    relay: str | None = None
    # False for replays and evaluations: the answer is logged but no conversation changes.
    persist: bool = True
    # OpenAI-style function tools the client defines (the model may call them; the client runs them),
    # and the choice: None/'auto', 'none', 'required', or 'function:<name>' to force one.
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | None = None
    # The answer may carry several calls (OpenAI's parallel_tool_calls); False: at most one.
    parallel_tool_calls: bool = False
    # Replays: the original request, and 'inference' (the logged prompt as it was) or 'pipeline'.
    replay_of: str | None = None
    replay_mode: Literal["inference", "pipeline"] | None = None
    # context: the tenant's safety policy (defaults when it set none), read by both safety stages and the logger
    safety: TenantSafety = Field(default_factory=TenantSafety)
    prompt_messages: list[ChatMessage] = Field(default_factory=list)
    prompt: str = ""
    prompt_tokens: int = 0
    history_turns: int = 0
    trimmed_turns: int = 0
    # tools: the tools planned for this message, set before safety_in is asked (it judges with them in mind)
    planned_tools: list[str] = Field(default_factory=list)
    # safety_in (asked by safety_out while the model prefills, or by tools before a tool runs), then tools
    verdicts: list[SafetyVerdict] = Field(default_factory=list)
    # The input verdict is in: nothing after the stage that asked needs to ask again.
    input_checked: bool = False
    # router
    route: RouteDecision | None = None
    # tools: what ran, and the tool-results block put into the prompt before the user's message
    tools: list[ToolEvent] = Field(default_factory=list)
    tool_prompt: str = ""
    # tools: the client's function tools that are MCP tools this tenant sees (`<server>__<tool>`): the
    # pipeline runs the model's calls to them itself, at most `mcp_rounds` times, and the model goes on.
    mcp_tools: list[str] = Field(default_factory=list)
    mcp_rounds: int = 0


class Forward(BaseModel):
    """What a pipeline stage hands back to the bus: the next subject, the work, and its decision."""

    subject: str
    work: Work
    decision: dict[str, Any] = Field(default_factory=dict)
    # The stage's part of the request's record (see switchyard/schemas/records.py).
    part: StagePart | None = None
    # Hand over by request/reply: the next stage acks at once, so a dead one is known at once. When
    # nobody answers on `subject`, the work goes to `fallback` (any live replica of the pool) instead.
    ack: bool = True
    fallback: str | None = None


class WorkAccepted(BaseModel):
    """An inference replica took the work (it streams on its own; this is only the hand-over)."""

    rid: str
    replica: str


class ChatEvent(BaseModel):
    """What the gateway relays to the client: from `chat.steps.<gateway>.*` (text and end) and `chat.events.<rid>.direct`."""

    rid: str
    # `holder` is for the gateway only, never relayed: the stage and replica that now hold the
    # request, so a gateway that hears nothing for a while can ask whether that process still lives.
    # `prompt`, for the gateway only too: inference took the request, with its prompt's token count
    # (`usage.prompt_tokens`) and the engine build (`system_fingerprint`), before any of its text.
    type: Literal["tool", "thinking", "delta", "done", "error", "holder", "prompt"]
    text: str = ""
    tool: ToolEvent | None = None
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    error: ErrorInfo | None = None
    model: str | None = None
    stage: str | None = None
    replica: str | None = None
    # When asked for and output safety left the text as the model wrote it: on `done`, every answer
    # token's; on a `delta`, the tokens of its own text (until a redaction, after which deltas carry none).
    logprobs: list[TokenLogprob] | None = None
    system_fingerprint: str | None = None


class StreamOpen(BaseModel):
    """Inference asks `pipeline.safety_out` for a checker before it publishes a single delta."""

    work: Work
    # The inference replica that streams (after a failover, not the one the router chose).
    producer: str = ""


class StreamOpenAck(BaseModel):
    rid: str
    replica: str


class RawChunk(BaseModel):
    """Inference output on `stream.steps.<checker>.<producer>` that is not a step's frame: the stream's end, after its
    frames (`seq` counts on from theirs)."""

    rid: str
    seq: int
    text: str = ""
    kind: Literal["delta", "thinking"] = "delta"
    finished: bool = False
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    error: ErrorInfo | None = None
    # On the finished chunk, when asked for: every answer token's log probability, in order.
    logprobs: list[TokenLogprob] | None = None


class CancelNotice(BaseModel):
    rid: str
    reason: str = "client_disconnected"
    # Characters of answer text (`delta` events) the gateway had relayed when the client stopped or
    # left: the saved turn keeps exactly that much, not what was still in flight behind it.
    delivered_chars: int | None = Field(default=None, ge=0)


class Turn(BaseModel):
    id: str
    rid: str
    user_text: str
    answer: str
    status: Literal["complete", "stopped", "error"]
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None
    created_ms: int = 0
    # Server-side tool steps of the turn, and the tool-results block they put in its prompt
    # (given again, verbatim, when a later turn renders this one as history), and the model's
    # released reasoning in thinking mode (shown to the user, never put back into a prompt).
    tools: list[ToolEvent] = Field(default_factory=list)
    tool_prompt: str = ""
    thinking: str = ""
    # Why a complete answer ended ('stop', 'length', ...): a stored response read back says whether it
    # ran out of tokens. None for turns stored before it was kept.
    finish_reason: str | None = Field(None, max_length=32)


class SaveTurn(BaseModel):
    tenant: str
    user: str
    chat_id: str
    turn: Turn


class SaveTurnAck(BaseModel):
    turn_id: str


class ConversationQuery(BaseModel):
    tenant: str
    chat_id: str
    user: str = ""


class ConversationReply(BaseModel):
    chat_id: str
    title: str | None = None
    created_ms: int = 0
    turns: list[Turn] = Field(default_factory=list)


class Heartbeat(BaseModel):
    replica: str
    pool: str
    model: str
    max_model_len: int
    running: int = 0
    waiting: int = 0
    ts_ms: int


class HealthRequest(BaseModel):
    probe: str = "readyz"
    # Liveness probes name the request they wait on: the reply then says whether it is still held here.
    rid: str | None = None


class HealthReply(BaseModel):
    stage: str
    replica: str
    ok: bool = True
    detail: str = ""
    # Whether this process still holds the probed request (None: no request was named).
    holds: bool | None = None


class StageRecord(BaseModel):
    """One stage's part of a request's record, published to JetStream `log.<stage>`."""

    rid: str
    stage: str
    replica: str = ""
    trace_id: str = ""
    tenant: str = ""
    started_ms: int
    duration_ms: float
    status: Literal["ok", "error"] = "ok"
    # Free-form: what the stage decided, kept under `stages.<stage>.decision` in the record.
    decision: dict[str, Any] = Field(default_factory=dict)
    # Typed: the stage's fields of the request's record, merged into its top level.
    part: StagePart | None = None
    error: ErrorInfo | None = None


class SpanRecord(BaseModel):
    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str
    service: str
    kind: str = "internal"
    start_ns: int
    end_ns: int
    status: str = "unset"
    attributes: dict[str, Any] = Field(default_factory=dict)
    events: list[dict[str, Any]] = Field(default_factory=list)
    rid: str | None = None


class SpanBatch(BaseModel):
    spans: list[SpanRecord]


class RequestQuery(BaseModel):
    rid: str
    # Set for a tenant's own lookup (feedback): a request of another tenant is then not found, in the same
    # one query as a rid that does not exist. None: any tenant's (the admin routes).
    tenant: str | None = None


class RequestRecordReply(BaseModel):
    rid: str
    record: dict[str, Any]
    spans: list[SpanRecord] = Field(default_factory=list)


class Strike(BaseModel):
    """One request that counted against a key: blocked by input safety (a flag never counts)."""

    rid: str
    # Always "block" now; "flag" still reads, in a standing stored when a tenant could make a flag a strike.
    action: Literal["block", "flag"] = "block"
    at_ms: int
    categories: list[str] = Field(default_factory=list)


class KeyStanding(BaseModel):
    """A key's standing, shared by every gateway through the key-value bucket `key_standing`."""

    key_id: str
    state: Literal["active", "suspended"] = "active"
    reason: str = ""
    since_ms: int = 0
    # Blocked requests in the window (the strikes); flagged ones since `since_ms`, which never count.
    blocked: int = 0
    flagged: int = 0
    # Suspended: the requests that caused it; active: the strikes in the current window, oldest first.
    strikes: list[Strike] = Field(default_factory=list)


class ToolSpecsQuery(BaseModel):
    tenant: str = ""


class ToolSpecs(BaseModel):
    """The server-side tools the tools stage runs (`GET /v1/tools`)."""

    tools: list[dict[str, Any]] = Field(default_factory=list)
