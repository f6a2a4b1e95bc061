"""What every chat API shares: the gateway's state, model names, and starting a request on the bus."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends
from opentelemetry import context as otel_context
from starlette.requests import HTTPConnection

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.bus import headers as H
from switchyard.libs.limits import Limiter
from switchyard.libs.models import Capability
from switchyard.libs.models.live import LiveModels
from switchyard.libs.plan import PlanError, plan
from switchyard.libs.store.keys import ApiKey, KeyStore
from switchyard.schemas import (
    ChatMessage,
    ConversationQuery,
    ConversationReply,
    ErrorCode,
    ResponseFormat,
    Sampling,
    ThinkingAsk,
    Work,
    subjects,
)
from switchyard.schemas.messages import Api, Mode, PromptMode
from switchyard.schemas.plan import RequestPlan
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.key_policy import KeyPolicy
from switchyard.services.gateway.lazy import OpenedOnUse
from switchyard.services.gateway.metrics import Metrics
from switchyard.services.gateway.product.pdf import PdfReader
from switchyard.services.gateway.runs.resume import mark_owner
from switchyard.services.gateway.runs.run import Run
from switchyard.services.gateway.runs.runs import Runs
from switchyard.services.gateway.settings import GatewaySettings
from switchyard.services.gateway.standing import Standings

MODES: tuple[Mode, ...] = ("fast", "reasoning")
# Seeds are stored and traced as signed 64-bit integers; larger ones are refused rather than wrapped.
MAX_SEED = 2**63 - 1


@dataclass
class Gateway:
    settings: GatewaySettings
    bus: Bus
    keys: KeyStore
    metrics: Metrics = field(default_factory=Metrics)
    runs: Runs = field(init=False)
    standings: Standings = field(init=False)
    key_policy: KeyPolicy = field(init=False)
    pdf: PdfReader = field(init=False)
    _limiter: OpenedOnUse[Limiter] = field(init=False)
    # The registry followed from the bus (switchyard/libs/models/live.py): `settings.registry` is the object it
    # keeps current. Set by __main__; None where the app runs on its settings' registry alone (tests).
    models: LiveModels | None = None

    def __post_init__(self) -> None:
        self.runs = Runs(self.bus, self.settings, self.metrics)
        self.standings = Standings(self.bus)
        self.key_policy = KeyPolicy(self.bus, self.keys, self.settings)
        self.pdf = PdfReader(self.settings)
        self._limiter = OpenedOnUse(
            lambda: Limiter.open(self.bus, self.settings.limits_bucket), "rate limits unavailable"
        )

    async def limiter(self) -> Limiter | None:
        """Without JetStream the gateway still serves, unlimited (lazy.py)."""
        if not self.settings.rate_limits:
            return None
        return await self._limiter.get()


def gateway(request: HTTPConnection) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


Gw = Annotated[Gateway, Depends(gateway)]


def request_id(request: HTTPConnection) -> str:
    rid: str = request.scope["state"]["rid"]
    return rid


def resolve_model(
    settings: GatewaySettings, name: str | None, need: Capability = "chat"
) -> tuple[str | None, Mode | None]:
    """`<model or alias>[:fast|:reasoning]` → (model, mode); an unknown model is 404 as in the OpenAI API, and
    one that cannot serve `need` (a chat request to a base model without a chat template) is 400, unless the
    operator configured a fallback for it, which the router then takes (and records)."""
    if not name:
        return None, None
    base, _, suffix = name.partition(":")
    mode: Mode | None = None
    if suffix:
        if suffix not in MODES:
            raise ApiError(ErrorCode.bad_request, f"unknown mode suffix {suffix!r} (use :fast or :reasoning)")
        mode = "fast" if suffix == "fast" else "reasoning"
    card = settings.registry.find(base)
    if card is None:
        raise ApiError(ErrorCode.not_found, f"model {base!r} does not exist; GET /v1/models lists them")
    if not card.can(need) and card.fallback is None:
        if need == "chat" and not card.chat_template:
            raise ApiError(
                ErrorCode.bad_request,
                f"model {card.name!r} is a base model with no chat template: it serves text completions only "
                "(POST /v1/completions)",
            )
        raise ApiError(ErrorCode.bad_request, f"model {card.name!r} does not serve {need}")
    return card.name, mode


EFFORTS = ("none", "minimal", "low", "medium", "high")


def effort_ask(effort: str | None) -> ThinkingAsk | None:
    """OpenAI's `reasoning_effort` (Chat Completions) / `reasoning.effort` (Responses) as a thinking ask;
    'xhigh' is served as 'high', the most this deployment offers."""
    if effort is None:
        return None
    effort = "high" if effort == "xhigh" else effort
    if effort not in EFFORTS:
        raise ApiError(ErrorCode.bad_request, f"reasoning_effort must be one of {', '.join(EFFORTS)}, not {effort!r}")
    return ThinkingAsk(effort=effort)  # type: ignore[arg-type]


def anthropic_thinking_ask(thinking: dict[str, Any] | None) -> ThinkingAsk | None:
    """Anthropic's `thinking`: {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}."""
    if not thinking:
        return None
    kind = thinking.get("type")
    if kind == "disabled":
        return ThinkingAsk(enabled=False)
    if kind != "enabled":
        raise ApiError(ErrorCode.bad_request, "thinking.type must be 'enabled' or 'disabled'")
    budget = thinking.get("budget_tokens")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 1):
        raise ApiError(ErrorCode.bad_request, "thinking.budget_tokens must be a positive integer")
    return ThinkingAsk(enabled=True, budget_tokens=budget)


# Past any vocabulary (the largest are ~262k tokens): a bound, so no absurd integer reaches a record.
MAX_TOP_K = 1 << 20


def sampling(
    settings: GatewaySettings,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    stop: list[str] | str | None = None,
    ignore_eos: bool = False,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    repetition_penalty: float | None = None,
    logit_bias: dict[int, float] | None = None,
    response_format: ResponseFormat | None = None,
    logprobs: int | None = None,
) -> Sampling:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if top_k is not None and not -1 <= top_k <= MAX_TOP_K:
        # vLLM's convention: -1 (and 0) turn top-k off; any other value keeps that many tokens.
        raise ApiError(
            ErrorCode.bad_request, f"top_k must be -1 (off) or an integer from 1 to {MAX_TOP_K}, not {top_k}"
        )
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ApiError(ErrorCode.bad_request, f"seed must be an integer from 0 to {MAX_SEED} (2^63-1)")
    values: dict[str, Any] = {
        "temperature": settings.default_temperature if temperature is None else temperature,
        "top_p": 1.0 if top_p is None else top_p,
        "top_k": max(top_k or 0, 0),
        "min_p": min_p or 0.0,
        # 0 is refused by the schema below, not taken for "the default".
        "max_tokens": settings.default_max_tokens if max_tokens is None else max_tokens,
        # Assigned when the client leaves it open, so every logged request replays exactly.
        "seed": seed if seed is not None else secrets.randbelow(2**31),
        "stop": stops,
        "ignore_eos": ignore_eos,
        "frequency_penalty": frequency_penalty or 0.0,
        "presence_penalty": presence_penalty or 0.0,
        "repetition_penalty": 1.0 if repetition_penalty is None else repetition_penalty,
        "logit_bias": logit_bias or {},
        "response_format": response_format,
        "logprobs": logprobs,
    }
    try:
        return Sampling.model_validate(values)
    except ValueError as e:
        raise ApiError(ErrorCode.bad_request, f"invalid sampling parameters: {e}") from e


def check_text(settings: GatewaySettings, text: str, what: str = "text") -> str:
    if not text.strip():
        raise ApiError(ErrorCode.bad_request, f"{what} is empty")
    if len(text) > settings.max_text_chars:
        raise ApiError(ErrorCode.payload_too_large, f"{what} is over {settings.max_text_chars} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(ErrorCode.bad_request, f"{what} is not valid Unicode (lone surrogate)") from e
    return text


def check_input_budget(settings: GatewaySettings, text: str, system: str | None, messages: list[ChatMessage]) -> None:
    """The request's whole input within the budget, or 413 naming the limit: what input safety reads grows
    with it, and one oversized request must not hold everyone else's."""
    count = len(messages) + 1
    if count > settings.max_messages:
        raise ApiError(
            ErrorCode.payload_too_large, f"the request has {count} messages; the limit is {settings.max_messages}"
        )
    chars = len(text) + len(system or "") + sum(len(m.content) for m in messages)
    if chars > settings.max_input_chars:
        raise ApiError(
            ErrorCode.payload_too_large,
            f"the request's messages hold {chars} characters; the limit is {settings.max_input_chars}",
        )


def _prefill_message(prefill: str | None) -> list[ChatMessage]:
    return [] if prefill is None else [ChatMessage(role="assistant", content=prefill)]


def _parent_context(request: HTTPConnection) -> otel_context.Context | None:
    """Continue the client's trace when it sent a W3C traceparent."""
    if "traceparent" not in request.headers:
        return None
    return H.extract_trace({k: v for k, v in request.headers.items() if k in ("traceparent", "tracestate")})


def within_reservation(p: RequestPlan, reserved: int | None, replan: Callable[[int], RequestPlan]) -> RequestPlan:
    """The plan cut to a key's budget reservation: prompt and answer together within the tokens reserved
    (context trims history to fit, and refuses a prompt that cannot). Where the reservation is smaller than
    the window, max_tokens is at most half of it, so a short prompt still gets an answer."""
    if reserved is None or reserved >= p.prompt_budget:
        return p
    cut = replan(max(1, min(p.max_tokens, reserved // 2))) if p.max_tokens > reserved // 2 else p
    return cut.model_copy(update={"prompt_budget": max(1, reserved)})


async def open_conversation(gw: Gateway, key: ApiKey, chat_id: str) -> ConversationReply:
    try:
        return await gw.bus.request(
            subjects.CONVERSATION_OPEN,
            ConversationQuery(tenant=key.tenant, chat_id=chat_id, user=key.user),
            ConversationReply,
            tenant=key.tenant,
        )
    except BusError as e:
        if e.code == ErrorCode.not_found:
            # Opening creates the tenant's conversation, so this is not expected; keep it a clean 404.
            raise ApiError(ErrorCode.not_found, f"conversation {chat_id!r} not found") from e
        raise


async def start_run(
    gw: Gateway,
    request: HTTPConnection,
    key: ApiKey,
    *,
    api: Api,
    route: str,
    text: str,
    chat_id: str | None = None,
    messages: list[ChatMessage] | None = None,
    system: str | None = None,
    model: str | None = None,
    mode: Mode | None = None,
    prompt_mode: PromptMode = "chat",
    sampling: Sampling,
    client_tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    rid: str | None = None,
    persist: bool = True,
    parallel_tool_calls: bool = False,
    thinking: ThinkingAsk | None = None,
    priority: int | None = None,
    prefill: str | None = None,
    add_generation_prompt: bool = True,
) -> Run:
    """Admit, take the limits, open the conversation, subscribe to the events, then publish the work.

    Limits come before the conversation so a refused request creates nothing. `priority` is the request's
    own engine priority (vLLM's request field), allowed only at or behind its key's tier's.
    """
    if prefill is not None:
        check_text(gw.settings, prefill, "the final assistant message (the answer's start)")
    check_input_budget(gw.settings, text, system, [*(messages or []), *_prefill_message(prefill)])
    tier = gw.settings.tiers.get(key.tier) or gw.settings.tiers["free"]

    # The request plan, once, before anything starts: a request that cannot be served is refused here.
    def replan(max_tokens: int) -> RequestPlan:
        try:
            return plan(
                gw.settings.registry,
                model=model,
                mode=mode,
                prompt_mode=prompt_mode,
                text=text,
                max_tokens=max_tokens,
                thinking=thinking,
                tier_priority=tier.priority,
                priority=priority,
            )
        except PlanError as e:
            raise ApiError(ErrorCode.bad_request, str(e)) from e

    request_plan = replan(sampling.max_tokens)
    # Another rid than the HTTP request's: one of several answers to it (OpenAI's `n`).
    rid = rid or request_id(request)
    run = gw.runs.begin(rid, api, route, key.tenant, key.id, _parent_context(request))
    async with gw.runs.starting(run):
        with run.activate():
            # The key's own models and budgets before the tenant's limits: a refused request
            # takes no lease.
            window = request_plan.prompt_budget
            if gw.settings.key_budget_reserve_tokens:
                window = min(window, gw.settings.key_budget_reserve_tokens)
            hold = await gw.key_policy.admit(key, gw.settings.registry.get(model).name, window)
            if hold is not None:
                # Settled however the run ends (a refusal below gives the whole reservation back).
                async def settle_budget(r: Run, settle: Callable[[int], Awaitable[None]] = hold.settle) -> None:
                    await settle(r.usage.prompt_tokens + r.usage.completion_tokens)

                run.on_finish.append(settle_budget)
                request_plan = within_reservation(request_plan, hold.reserved, replan)
            limiter = await gw.limiter()
            if limiter is not None:
                limits = tier
                refusal = await limiter.admit(key.tenant, rid, limits, lease_s=gw.settings.request_timeout_s + 30)
                if refusal is not None:
                    gw.metrics.rate_limited.labels(refusal.limit).inc()
                    raise ApiError(ErrorCode.rate_limited, refusal.message, retry_after=refusal.retry_after_s)

                async def settle(r: Run) -> None:
                    usage = r.usage
                    await limiter.settle(key.tenant, r.rid, usage.prompt_tokens + usage.completion_tokens, limits)

                run.on_finish.append(settle)
            if chat_id is not None:
                await open_conversation(gw, key, chat_id)
        work = Work(
            rid=rid,
            tenant=key.tenant,
            user=key.user,
            key_id=key.id,
            api=api,
            chat_id=chat_id,
            text=text,
            messages=messages or [],
            system=system,
            model=model,
            mode=mode,
            prompt_mode=prompt_mode,
            prefill=prefill,
            add_generation_prompt=add_generation_prompt,
            sampling=sampling,
            thinking=thinking,
            plan=request_plan,
            created_ms=run.started_ms,
            client_tools=client_tools or [],
            tool_choice=tool_choice,
            persist=persist,
            parallel_tool_calls=parallel_tool_calls,
        )
        if gw.settings.resume_stream:
            await mark_owner(gw.bus, rid, key.tenant)
        await gw.runs.launch(run, work)
    return run
