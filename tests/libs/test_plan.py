"""The request plan: decided once from the request and the registry (switchyard/libs/plan.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from switchyard.libs.models import GEMMA_MODEL_NAME, ModelCard, ModelRegistry
from switchyard.libs.plan import PlanError, plan, plan_work, template_inputs
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from switchyard.libs.tokenizer.template import model_template
from switchyard.schemas import ThinkingAsk, ThinkingSpec, Work

THINKER = ModelCard(name="thinker", aliases=["qwen3"], pool="thinker", engine="sim", thinking=ThinkingSpec())
QWEN3_SWITCH = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def registry(**kw: object) -> ModelRegistry:
    return ModelRegistry(models=[*ModelRegistry().models, THINKER], **kw)  # type: ignore[arg-type]


def test_a_thinking_model_thinks_by_default_within_a_budget_under_max_tokens() -> None:
    p = plan(registry(), model="qwen3", text="hi", max_tokens=200)
    assert (p.model, p.mode, p.thinking, p.mode_reason) == (
        "thinker",
        "reasoning",
        "native",
        "thinking model's default",
    )
    assert p.max_tokens == 200 and 0 < p.thinking_budget < 200
    assert p.template_kwargs == {"enable_thinking": True} and p.thinking_spec == ThinkingSpec()
    assert p.prompt_budget == THINKER.context_length


@pytest.mark.parametrize(
    ("ask", "budget"),
    [
        (ThinkingAsk(effort="low"), 50),
        (ThinkingAsk(effort="high"), 150),
        (ThinkingAsk(enabled=True, budget_tokens=64), 64),
        # Anthropic requires budget_tokens below max_tokens; the answer always keeps a token.
        (ThinkingAsk(enabled=True, budget_tokens=5000), 199),
    ],
)
def test_the_thinking_budget_follows_the_effort_or_budget_tokens(ask: ThinkingAsk, budget: int) -> None:
    p = plan(registry(), model="thinker", max_tokens=200, thinking=ask)
    assert (p.thinking, p.thinking_budget, p.max_tokens) == ("native", budget, 200)


@pytest.mark.parametrize("ask", [ThinkingAsk(effort="none"), ThinkingAsk(enabled=False)])
def test_thinking_turned_off(ask: ThinkingAsk) -> None:
    p = plan(registry(), model="thinker", max_tokens=200, thinking=ask, mode="reasoning")
    assert (p.mode, p.thinking, p.thinking_budget) == ("fast", "off", 0)
    assert p.template_kwargs == {"enable_thinking": False}


def test_a_model_that_cannot_think_gets_the_prompted_phase_and_max_tokens_is_never_raised() -> None:
    p = plan(registry(), model=f"{DEFAULT_MODEL_NAME}:reasoning", max_tokens=48, thinking=ThinkingAsk(effort="medium"))
    assert (p.mode, p.thinking, p.thinking_budget, p.max_tokens) == ("reasoning", "prompted", 24, 48)
    assert p.template_kwargs == {} and p.thinking_spec is None
    # The classifier still picks the mode where nothing is asked.
    assert plan(registry(), model=None, text="Prove it step by step", max_tokens=48).thinking == "prompted"
    assert plan(registry(), model=None, text="hi", max_tokens=48).thinking == "off"


def test_no_room_to_think_and_text_completions_do_not_think() -> None:
    assert plan(registry(), model="thinker", max_tokens=1).thinking == "off"
    raw = plan(registry(), model="thinker", prompt_mode="raw", max_tokens=50, thinking=ThinkingAsk(effort="high"))
    assert (raw.mode, raw.thinking, raw.template_kwargs) == ("fast", "off", {})


def test_a_chat_to_a_base_model_is_planned_for_its_fallback_so_context_renders_the_fallbacks_template() -> None:
    p = plan(registry(model_fallbacks={GEMMA_MODEL_NAME: DEFAULT_MODEL_NAME}), model="gemma3-270m", max_tokens=9)
    assert (p.model, p.asked) == (DEFAULT_MODEL_NAME, GEMMA_MODEL_NAME)
    assert p.fallback_reason is not None and "no chat template" in p.fallback_reason
    with pytest.raises(PlanError, match="no chat template"):
        plan(registry(), model=GEMMA_MODEL_NAME, max_tokens=9)


def test_the_plan_is_frozen_and_work_keeps_the_one_it_carries() -> None:
    p = plan(registry(), model="thinker", max_tokens=20)
    with pytest.raises(ValidationError):
        p.max_tokens = 768  # type: ignore[misc]
    w = Work(rid="r", tenant="t", user="u", key_id="k", text="hi", model=DEFAULT_MODEL_NAME, plan=p)
    assert plan_work(w, registry()) is p


def test_thinking_off_under_a_template_without_the_switch_closes_an_empty_block_after_the_prompt() -> None:
    off = plan(registry(), model="thinker", max_tokens=20, thinking=ThinkingAsk(effort="none"))
    on = plan(registry(), model="thinker", max_tokens=20)
    plain = model_template(None, fallback="chatml")
    assert template_inputs(off, plain) == ({"enable_thinking": False}, "<think>\n\n</think>\n\n")
    assert template_inputs(on, plain) == ({"enable_thinking": True}, "")
    # A template that reads the switch writes the empty block itself.
    switch = model_template(QWEN3_SWITCH)
    assert template_inputs(off, switch) == ({"enable_thinking": False}, "")
    assert template_inputs(None, plain) == ({}, "")


def test_the_switch_reaches_the_chat_template() -> None:
    from switchyard.libs.tokenizer.template import render_prompt

    switch = model_template(QWEN3_SWITCH)
    msgs = [{"role": "user", "content": "hi"}]
    assert render_prompt(switch, msgs, template_kwargs={"enable_thinking": False}).endswith("<think>\n\n</think>\n\n")
    assert render_prompt(switch, msgs, template_kwargs={"enable_thinking": True}).endswith("assistant\n")


def test_the_priority_is_the_tiers_or_one_behind_it() -> None:
    assert plan(registry(), model=None, max_tokens=8, tier_priority=10).priority == 10
    assert plan(registry(), model=None, max_tokens=8, tier_priority=10, priority=40).priority == 40
    with pytest.raises(PlanError, match="10 to 100"):
        plan(registry(), model=None, max_tokens=8, tier_priority=10, priority=3)
    with pytest.raises(PlanError, match="0 to 100"):
        plan(registry(), model=None, max_tokens=8, priority=101)
