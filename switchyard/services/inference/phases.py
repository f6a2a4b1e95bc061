"""Generation phases. Fast mode is one phase; reasoning mode on a model that was never trained to think
first thinks as prompted (streamed as `thinking`, within the request plan's thinking budget), then answers
with the thinking in its context. Both phases share the prompt, so the answer phase is served from the
prefix cache the thinking phase filled. A model whose card says it thinks does so by itself instead
(switchyard/services/inference/reasoning.py)."""

from __future__ import annotations

import json

from switchyard.libs.engine import Constraint, SamplingParams
from switchyard.schemas import ResponseFormat, Sampling, Work

THINK_OPEN = "Let me think this through step by step.\n"
ANSWER_OPEN = "\n\nFinal answer: "


def params_of(
    s: Sampling,
    max_tokens: int | None = None,
    extra_stop: list[str] | None = None,
    constraint: Constraint | None = None,
) -> SamplingParams:
    return SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        min_p=s.min_p,
        seed=s.seed,
        max_tokens=max_tokens or s.max_tokens,
        stop=[*s.stop, *(extra_stop or [])],
        ignore_eos=s.ignore_eos,
        frequency_penalty=s.frequency_penalty,
        presence_penalty=s.presence_penalty,
        repetition_penalty=s.repetition_penalty,
        logit_bias=dict(s.logit_bias),
        constraint=constraint,
        logprobs=s.logprobs,
    )


def answer_request_id(rid: str) -> str:
    return f"{rid}#answer"


TOOL_CALL_CLOSE = "</tool_call>"


def _function(client_tools: list[dict[str, object]], name: str) -> dict[str, object]:
    return next((t for t in client_tools if t.get("name") == name), {})


def _first_string_argument(fn: dict[str, object]) -> str | None:
    """The function's first required (else first) argument when it is a string: a forced call opens it."""
    params = fn.get("parameters")
    props = params.get("properties", {}) if isinstance(params, dict) else {}
    required = params.get("required", []) if isinstance(params, dict) else []
    first = (required or list(props) or [None])[0]
    if isinstance(first, str) and isinstance(props, dict) and (props.get(first) or {}).get("type") == "string":
        return first
    return None


def tool_prefill(client_tools: list[dict[str, object]], tool_choice: str | None) -> str:
    """When the client forces a tool call, the answer starts with the call's opening, so even a small
    model completes a well-formed call; with a named function, the name is not the model's to choose."""
    if not client_tools or tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice.startswith("function:"):
        name = tool_choice.removeprefix("function:")
        opening = '<tool_call>{"name": "' + name + '", "arguments": {'
        first = _first_string_argument(_function(client_tools, name))
        if first is not None:
            # Open the first required string argument too: the model only has to write its value.
            return opening + json.dumps(first) + ': "'
        return opening
    return '<tool_call>{"name": "'


def _format_constraint(f: ResponseFormat) -> Constraint:
    if f.type == "json_schema":
        return Constraint("json_schema", json.dumps(f.json_schema or {}))
    if f.type == "regex":
        return Constraint("regex", f.regex or "")
    if f.type == "choice":
        return Constraint("choice", json.dumps(f.choices))
    return Constraint("json_object")


def answer_constraint(work: Work, prefill: str = "") -> Constraint | None:
    """The grammar the answer phase decodes under: a forced tool call (`required` or a named function,
    whose opening `prefill` is already in the prompt), the client's response format, or, with tools on
    `auto`, free text in which any tool call the model opens is well-formed. None: unconstrained."""
    tools = [{"name": t.get("name"), "parameters": t.get("parameters") or {}} for t in work.client_tools]
    choice = work.tool_choice
    if tools and choice not in ("none", None, "auto"):
        spec: dict[str, object] = {"mode": "required", "tools": tools}
        if work.parallel_tool_calls:
            spec["parallel"] = True
        if choice.startswith("function:"):
            name = choice.removeprefix("function:")
            spec["tools"] = [t for t in tools if t["name"] == name]
            spec["first"] = _first_string_argument(_function(work.client_tools, name))
        return Constraint("tools", json.dumps(spec), prefix=prefill)
    if work.sampling.response_format is not None:
        return _format_constraint(work.sampling.response_format)
    if tools and choice != "none":
        return Constraint("tools", json.dumps({"mode": "auto", "tools": tools}))
    return None
