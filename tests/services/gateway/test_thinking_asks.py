"""What each protocol's client says about thinking, as the plan reads it (services/gateway/core.py)."""

from __future__ import annotations

import pytest

from switchyard.schemas import ErrorCode, ThinkingAsk
from switchyard.services.gateway.core import anthropic_thinking_ask, effort_ask
from switchyard.services.gateway.errors import ApiError


def test_reasoning_effort() -> None:
    assert effort_ask(None) is None
    assert effort_ask("none") == ThinkingAsk(effort="none")
    assert effort_ask("low") == ThinkingAsk(effort="low")
    assert effort_ask("xhigh") == ThinkingAsk(effort="high")  # the most this deployment offers
    with pytest.raises(ApiError) as e:
        effort_ask("extreme")
    assert e.value.code == ErrorCode.bad_request


def test_anthropic_thinking() -> None:
    assert anthropic_thinking_ask(None) is None
    assert anthropic_thinking_ask({"type": "disabled"}) == ThinkingAsk(enabled=False)
    assert anthropic_thinking_ask({"type": "enabled", "budget_tokens": 1024}) == ThinkingAsk(
        enabled=True, budget_tokens=1024
    )
    for bad in (
        {"type": "sometimes"},
        {"type": "enabled", "budget_tokens": 0},
        {"type": "enabled", "budget_tokens": "9"},
    ):
        with pytest.raises(ApiError):
            anthropic_thinking_ask(bad)
