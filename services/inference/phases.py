"""Generation phases. Fast mode is one phase; reasoning mode first thinks (streamed as `thinking`),
then answers with the thinking in its context. Both phases share the prompt, so the answer phase is
served from the prefix cache the thinking phase filled."""

from __future__ import annotations

import json
from dataclasses import dataclass

from libs.engine import SamplingParams
from schemas import Sampling

THINK_OPEN = "Let me think this through step by step.\n"
ANSWER_OPEN = "\n\nFinal answer: "


@dataclass(frozen=True)
class Phase:
    kind: str  # 'thinking' | 'delta'
    request_id: str
    params: SamplingParams


def params_of(s: Sampling, max_tokens: int | None = None, extra_stop: list[str] | None = None) -> SamplingParams:
    return SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        seed=s.seed,
        max_tokens=max_tokens or s.max_tokens,
        stop=[*s.stop, *(extra_stop or [])],
        ignore_eos=s.ignore_eos,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        repetition_penalty=s.repetition_penalty,
        logit_bias=dict(s.logit_bias),
    )


def thinking_budget(s: Sampling) -> int:
    # A third of the budget for thinking, the rest for the answer.
    return max(16, s.max_tokens // 3)


def answer_request_id(rid: str) -> str:
    return f"{rid}#answer"


TOOL_CALL_CLOSE = "</tool_call>"


def tool_prefill(client_tools: list[dict[str, object]], tool_choice: str | None) -> str:
    """When the client forces a tool call, the answer starts with the call's opening, so even a small
    model completes a well-formed call; with a named function, the name is not the model's to choose."""
    if not client_tools or tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice.startswith("function:"):
        name = tool_choice.removeprefix("function:")
        fn = next((t for t in client_tools if t.get("name") == name), {})
        params = fn.get("parameters")
        props = params.get("properties", {}) if isinstance(params, dict) else {}
        required = params.get("required", []) if isinstance(params, dict) else []
        first = (required or list(props) or [None])[0]
        opening = '<tool_call>{"name": "' + name + '", "arguments": {'
        if isinstance(first, str) and isinstance(props, dict) and (props.get(first) or {}).get("type") == "string":
            # Open the first required string argument too: the model only has to write its value.
            return opening + json.dumps(first) + ': "'
        return opening
    return '<tool_call>{"name": "'
