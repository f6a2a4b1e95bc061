"""The request plan (switchyard/schemas/plan.py), decided once: a pure function of the request and the registry.

The gateway calls it before it publishes the work, so the prompt is rendered with the template of the model
that will serve it (a chat the named model cannot serve goes to its configured fallback here, not after
rendering), and an impossible request is refused before anything starts. Context and the router call it only
for work that arrives without a plan (internal callers, an older gateway during a rolling upgrade), and put
it on the work they forward, so it is still decided once.
"""

from __future__ import annotations

import re

from switchyard.libs.models import Capability, ModelCard, ModelRegistry
from switchyard.libs.tokenizer.template import ModelTemplate
from switchyard.schemas import Work
from switchyard.schemas.models import Mode
from switchyard.schemas.plan import MAX_PRIORITY, Effort, RequestPlan, ThinkingAsk, ThinkingKind

# Messages that benefit from a thinking phase: proofs, multi-step maths, explicit requests to reason.
_REASONING = re.compile(
    r"\b(step[- ]by[- ]step|prove|proof|derive|reason(?:ing)? through|think (?:it )?through|why does|"
    r"calculate|solve)\b",
    re.IGNORECASE,
)
_MODES: tuple[Mode, ...] = ("fast", "reasoning")
# The share of max_tokens each reasoning_effort may spend thinking; the rest is the answer's.
EFFORT_SHARE: dict[Effort, float] = {"none": 0.0, "minimal": 0.125, "low": 0.25, "medium": 0.5, "high": 0.75}
# What a model trained to think gets when the client names no effort.
DEFAULT_EFFORT: Effort = "medium"
# The prompted phase's share when nothing is asked (its thinking is weaker: most of the budget answers).
PROMPTED_SHARE = 1 / 3
PROMPTED_MIN = 16


class PlanError(ValueError):
    """The request cannot be served as asked (a 400)."""


def classify_mode(text: str) -> Mode:
    return "reasoning" if _REASONING.search(text) else "fast"


def _need(prompt_mode: str) -> Capability:
    return "completion" if prompt_mode == "raw" else "chat"


def _able(registry: ModelRegistry, card: ModelCard, need: Capability) -> tuple[ModelCard, str | None]:
    """`card` when it serves `need`, else its operator-configured fallback (with the reason), else PlanError."""
    if card.can(need):
        return card, None
    what = "chat (it has no chat template)" if need == "chat" and not card.chat_template else need
    fallback = registry.find(card.fallback) if card.fallback else None
    if fallback is None or not fallback.can(need):
        raise PlanError(f"model {card.name} does not serve {what}")
    return fallback, f"fallback: {card.name} does not serve {what}; its configured fallback is {fallback.name}"


def _asks_off(ask: ThinkingAsk | None) -> bool:
    return ask is not None and (ask.enabled is False or ask.effort == "none")


def _asks_on(ask: ThinkingAsk | None) -> bool:
    return ask is not None and not _asks_off(ask) and (ask.enabled or ask.effort is not None)


def _mode(
    card: ModelCard, prompt_mode: str, mode: Mode | None, suffix: str, ask: ThinkingAsk | None, text: str
) -> tuple[Mode, str]:
    if prompt_mode == "raw":
        return "fast", "text completion"
    if _asks_off(ask):
        return "fast", "thinking turned off"
    if mode:
        return mode, "requested"
    if suffix:
        if suffix not in _MODES:
            raise PlanError(f"unknown mode suffix {suffix!r} (use :fast or :reasoning)")
        return ("fast" if suffix == "fast" else "reasoning"), "model name"
    if _asks_on(ask):
        return "reasoning", "thinking asked for"
    if card.thinking is not None:
        return ("reasoning" if card.thinking.default_on else "fast"), "thinking model's default"
    return classify_mode(text), "classifier"


def _budget(kind: ThinkingKind, ask: ThinkingAsk | None, max_tokens: int) -> int:
    """Thinking tokens at most: always room for at least one answer token."""
    if kind == "off":
        return 0
    if ask is not None and ask.budget_tokens is not None:
        want = ask.budget_tokens
    elif ask is not None and ask.effort is not None:
        want = int(max_tokens * EFFORT_SHARE[ask.effort])
    elif kind == "native":
        want = int(max_tokens * EFFORT_SHARE[DEFAULT_EFFORT])
    else:
        want = max(PROMPTED_MIN, int(max_tokens * PROMPTED_SHARE))
    return max(0, min(max(want, 1), max_tokens - 1))


def scheduling_priority(tier_priority: int, asked: int | None) -> int:
    """The engine priority of a request (lower is sooner): its key's tier's, or the one it asked for when that
    is no sooner. A request may put itself behind its tier (a batch job), never ahead of it."""
    if asked is None:
        return tier_priority
    if not tier_priority <= asked <= MAX_PRIORITY:
        raise PlanError(
            f"priority {asked} is outside what this API key's tier allows: {tier_priority} to {MAX_PRIORITY}"
            " (lower is served sooner)"
        )
    return asked


def plan(
    registry: ModelRegistry,
    *,
    model: str | None,
    mode: Mode | None = None,
    prompt_mode: str = "chat",
    text: str = "",
    max_tokens: int,
    thinking: ThinkingAsk | None = None,
    tier_priority: int = 0,
    priority: int | None = None,
) -> RequestPlan:
    """The plan for one request. `model` is a name or alias, optionally with a `:fast`/`:reasoning` suffix;
    an unknown name gets the default model (the HTTP APIs have already refused it with a 404). `tier_priority`
    is the key's tier's engine priority, `priority` the request's own (scheduling_priority)."""
    scheduled = scheduling_priority(tier_priority, priority)
    name, _, suffix = (model or registry.default_model).partition(":")
    asked = registry.find(name) or registry.get(None)
    card, why_fallback = _able(registry, asked, _need(prompt_mode))
    chosen, why = _mode(card, prompt_mode, mode, suffix, thinking, text)
    if not card.offers(chosen):
        chosen, why = "fast", f"{chosen} not offered by {card.name}"
    kind: ThinkingKind = "off" if chosen == "fast" else ("native" if card.thinking is not None else "prompted")
    budget = _budget(kind, thinking, max_tokens)
    if kind != "off" and budget == 0:
        chosen, why, kind = "fast", f"max_tokens={max_tokens} leaves no room to think", "off"
    spec = card.thinking
    switch = spec.template_switch if spec is not None and prompt_mode != "raw" else None
    return RequestPlan(
        model=card.name,
        asked=asked.name if asked.name != card.name else None,
        fallback_reason=why_fallback,
        mode=chosen,
        mode_reason=why,
        thinking=kind,
        thinking_spec=spec,
        thinking_budget=budget,
        prompt_budget=card.context_length,
        max_tokens=max_tokens,
        template_kwargs={} if switch is None else {switch: kind == "native"},
        priority=scheduled,
    )


def plan_work(work: Work, registry: ModelRegistry) -> RequestPlan:
    """The work's plan: the one it carries, else the plan for its request (for work that arrives without one)."""
    if work.plan is not None:
        return work.plan
    return plan(
        registry,
        model=work.model,
        mode=work.mode,
        prompt_mode=work.prompt_mode,
        text=work.text,
        max_tokens=work.sampling.max_tokens,
        thinking=work.thinking,
    )


def template_inputs(p: RequestPlan | None, template: ModelTemplate) -> tuple[dict[str, bool], str]:
    """What the chat template is rendered with for plan `p`, and the text that follows its generation prompt.
    A thinking model that is not to think, under a template without the card's switch, gets an empty thinking
    block after the prompt: that is what Qwen3's own template writes when `enable_thinking` is false, and
    such a model then answers at once."""
    if p is None:
        return {}, ""
    spec = p.thinking_spec
    if spec is None or p.thinking != "off" or (spec.template_switch and template.reads(spec.template_switch)):
        return dict(p.template_kwargs), ""
    return dict(p.template_kwargs), f"{spec.open}\n\n{spec.close}\n\n"
