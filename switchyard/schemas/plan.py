"""The request plan: what a request is served as, decided once before its prompt is rendered.

The gateway asks `switchyard.libs.plan.plan` (a pure function of the request and the model registry) and
puts the answer on the `Work` it publishes. Context renders with the plan's model and template switch
within its prompt budget; the router picks a pool and replica for the plan's model; inference generates
within its max_tokens and thinking budget. No stage rewrites it (the model is frozen).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from switchyard.schemas.models import Mode, ThinkingSpec

# OpenAI's reasoning_effort values (Chat Completions and Responses); 'none' turns thinking off.
Effort = Literal["none", "minimal", "low", "medium", "high"]
# off: no thinking. native: the model's own (its card's ThinkingSpec), parsed out of its text.
# prompted: a thinking phase we prompt for, for a model that was never trained to think.
ThinkingKind = Literal["off", "native", "prompted"]
# The engine's scheduling priority: lower is served sooner (vLLM's convention), 0 the soonest.
MAX_PRIORITY = 100


class ThinkingAsk(BaseModel):
    """What the client asked about thinking, in the terms of its protocol."""

    model_config = ConfigDict(frozen=True)

    # Chat Completions' `reasoning_effort`, Responses' `reasoning.effort`.
    effort: Effort | None = None
    # Anthropic Messages' `thinking`: {"type": "enabled", "budget_tokens": N} or {"type": "disabled"}.
    enabled: bool | None = None
    budget_tokens: int | None = Field(None, ge=1)


class RequestPlan(BaseModel):
    """Decided once (switchyard/libs/plan.py); every later stage reads it and none rewrites it."""

    model_config = ConfigDict(frozen=True)

    # The served model after aliases and the operator's fallback for what the model cannot serve
    # (a chat to a base model); `asked` is the model the request named when that differs.
    model: str
    asked: str | None = None
    fallback_reason: str | None = None
    mode: Mode
    # Why this mode: 'requested', 'model name', 'classifier', 'thinking model default', ...
    mode_reason: str
    thinking: ThinkingKind = "off"
    # The model's delimiters and template switch, for native thinking (and for turning it off).
    thinking_spec: ThinkingSpec | None = None
    # Thinking tokens at most; once spent, the thinking is closed and the answer follows. 0 when off.
    thinking_budget: int = Field(0, ge=0)
    # Prompt plus output tokens the model holds (its card's context_length).
    prompt_budget: int = Field(ge=1)
    # Output tokens at most, thinking included: the client's max_tokens (or the gateway's default), never raised.
    max_tokens: int = Field(ge=1)
    # Keyword arguments the chat template is rendered with (Qwen3's enable_thinking).
    template_kwargs: dict[str, bool] = Field(default_factory=dict)
    # The engine's scheduling priority (lower is sooner): the key's tier's, or the request's own `priority`
    # where that is no sooner than the tier allows. The engine ages waiting requests (docs/architecture.md).
    priority: int = Field(0, ge=0, le=MAX_PRIORITY)
