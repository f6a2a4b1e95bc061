"""Merging typed stage parts into one record, and reading the record back through `RequestRecord`."""

from __future__ import annotations

from switchyard.libs.store.record_merge import merge_stage, summarize
from switchyard.libs.store.record_text import scrub
from switchyard.schemas import (
    ContextPart,
    InferencePart,
    McpCall,
    McpToolRan,
    RequestRecord,
    RouteDecision,
    RoutePart,
    SafetyInPart,
    SafetyOutcome,
    SafetyOutPart,
    Sampling,
    StagePart,
    StageRecord,
    ToolEvent,
    ToolsPart,
    Usage,
)


def _stage(stage: str, part: StagePart | None, start: int = 1_000, **decision: object) -> StageRecord:
    return StageRecord(
        rid="r1", stage=stage, tenant="acme", started_ms=start, duration_ms=5.0, part=part, decision=decision
    )


def test_parts_merge_to_the_top_level_and_decisions_stay_with_their_stage() -> None:
    context = _stage("context", ContextPart(prompt="short", chat_id="c1"), prompt_tokens=3)
    tools = _stage("tools", ToolsPart(prompt="short plus tool results"), 1_002, planned=["orders"])
    rec = merge_stage(merge_stage({}, tools), context)  # arrival order must not matter
    assert rec["prompt"] == "short plus tool results" and rec["sources"]["prompt"] == "tools"
    assert rec["chat_id"] == "c1"
    # Only what a stage set is written: tools left `tools` and `tool_verdicts` unset.
    assert "tools" not in rec and "tool_verdicts" not in rec and "kind" not in rec
    assert rec["stages"]["context"]["decision"] == {"prompt_tokens": 3}
    assert rec["stages"]["tools"]["decision"] == {"planned": ["orders"]}
    assert merge_stage(rec, context) == rec


def test_a_part_survives_the_wire_with_only_its_set_fields() -> None:
    usage = Usage(prompt_tokens=7, completion_tokens=2)
    part = InferencePart(model="m", usage=usage, sampling=Sampling(seed=3), raw_output="hi", ttft_ms=None)
    sent = _stage("inference", part, finish_reason="stop")
    got = StageRecord.model_validate_json(sent.model_dump_json())
    assert got == sent
    rec = merge_stage({}, got)
    # Nested models are written whole (`usage` keeps its defaults), as the stages always wrote them.
    assert rec["usage"] == usage.model_dump(mode="json") and rec["sampling"]["seed"] == 3
    assert rec["ttft_ms"] is None and "tpot_ms" not in rec and "thinking" not in rec


def test_the_record_reads_back_typed_and_scrubbed() -> None:
    route = RouteDecision(model="m", mode="reasoning", pool="p", replica="x", reason="r")
    rec = merge_stage(
        merge_stage({}, _stage("router", RoutePart(route=route))), _stage("context", ContextPart(prompt="p"))
    )
    typed = RequestRecord.model_validate(rec)
    assert typed.route == route and typed.prompt == "p" and typed.stages["router"].duration_ms == 5.0
    hidden = RequestRecord.model_validate(scrub(rec))
    assert not isinstance(hidden.prompt, str) and hidden.prompt is not None and hidden.prompt.chars == 1
    summary = summarize(rec)
    assert summary["mode"] == "reasoning" and summary["prompt_tokens"] is None and summary["status"] == "running"


def test_an_answer_stopped_by_output_safety_summarizes_as_a_block() -> None:
    stopped = SafetyOutPart(status="error", safety_out=SafetyOutcome(blocked="violence"))
    rec = merge_stage(
        merge_stage({}, _stage("safety_in", SafetyInPart(safety_action="allow"))), _stage("safety_out", stopped)
    )
    assert rec["safety_out"]["blocked"] == "violence"
    assert summarize(rec)["safety_action"] == "block" and summarize(rec)["status"] == "error"


def test_the_model_s_mcp_calls_are_kept_with_the_last_prompt_and_scrubbed() -> None:
    event = ToolEvent(id="c1", name="inv__stock", arguments={"sku": "A-1"}, status="ok", output="42 units")
    call = McpCall(id="c1", name="inv__stock", server="inv", transport="http", status="ok", result_bytes=8)
    ran = McpToolRan(round=0, event=event, call=call, prompt="<tool_results>42 units</tool_results>")
    tools = _stage("tools", ToolsPart(prompt="first prompt"))
    inference = InferencePart(raw_output="There are 42.")
    inference.mcp_rounds, inference.prompt = [ran], "last prompt"
    rec = merge_stage(merge_stage({}, tools), _stage("inference", inference))
    # The last round's prompt is the record's: an inference replay starts from it.
    assert rec["prompt"] == "last prompt" and rec["mcp_rounds"][0]["call"]["server"] == "inv"
    # Without calls, inference leaves the tools stage's prompt alone.
    plain = merge_stage(merge_stage({}, tools), _stage("inference", InferencePart(raw_output="x")))
    assert plain["prompt"] == "first prompt" and "mcp_rounds" not in plain
    hidden = scrub(rec)["mcp_rounds"][0]
    assert hidden["event"]["arguments"] == {} and hidden["event"]["output"]["chars"] == len("42 units")
    assert hidden["prompt"]["chars"] == len(ran.prompt) and hidden["call"]["result_bytes"] == 8
