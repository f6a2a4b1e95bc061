"""Merging stage records into one request record, and the record's filterable columns (see `records.py`)."""

from __future__ import annotations

from typing import Any

from switchyard.libs.store.sql import now_ms
from switchyard.schemas import RequestRecord, StageRecord, Usage, subjects


def _rank(stage: str) -> int:
    return subjects.STAGES.index(stage) if stage in subjects.STAGES else -1


def merge_stage(record: dict[str, Any], stage: StageRecord) -> dict[str, Any]:
    """`record` with one stage's part merged in; applying the same stage twice gives the same record.

    The stage's timing, status and free-form decision go under `stages.<stage>`; the fields its typed
    part set go to the top level, where a later stage's value wins over an earlier one's.
    """
    out = dict(record)
    stages = dict(out.get("stages") or {})
    stages[stage.stage] = {
        "replica": stage.replica,
        "started_ms": stage.started_ms,
        "duration_ms": stage.duration_ms,
        "status": stage.status,
        "decision": dict(stage.decision),
        "error": stage.error.model_dump(mode="json") if stage.error else None,
    }
    out["stages"] = stages
    if stage.part is not None:
        top = stage.part.model_dump(mode="json")
        top.pop("kind", None)
        sources = dict(out.get("sources") or {})
        for k, v in top.items():
            owner = sources.get(k)
            if owner is None or owner == stage.stage or _rank(stage.stage) >= _rank(owner):
                out[k] = v
                sources[k] = stage.stage
        out["sources"] = sources
    out["rid"] = stage.rid
    for key in ("tenant", "trace_id"):
        value = getattr(stage, key)
        if value and not out.get(key):
            out[key] = value
    if stage.error and not out.get("error"):
        out["error"] = {"stage": stage.stage, **stage.error.model_dump(mode="json")}
    return out


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The filterable columns of a record."""
    rec = RequestRecord.model_validate(record)
    starts = [s.started_ms for s in rec.stages.values()]
    ends = [s.started_ms + s.duration_ms for s in rec.stages.values()]
    created = min(starts) if starts else now_ms()
    status = rec.status
    if status is None:
        status = "error" if any(s.status == "error" for s in rec.stages.values()) else "running"
    usage = rec.usage or Usage()

    def tokens(key: str) -> int | None:
        # A count the record never reported stays empty rather than 0.
        return getattr(usage, key) if key in usage.model_fields_set else None

    mode = rec.mode or (rec.route.mode if rec.route else None)
    action = rec.safety_action
    if rec.safety_out is not None and rec.safety_out.blocked:
        action = "block"
    return {
        "tenant": rec.tenant,
        "trace_id": rec.trace_id,
        "status": status[:32],
        "model": rec.model[:200] if rec.model else None,
        "api": rec.api[:32] if rec.api else None,
        "replay_of": rec.replay_of or None,
        "key_id": rec.key_id[:64] if rec.key_id else None,
        "mode": mode[:16] if mode else None,
        "safety_action": action[:16] if action else None,
        "created_ms": int(created),
        "latency_ms": (max(ends) - created) if ends else None,
        "ttft_ms": usage.ttft_ms,
        "tpot_ms": usage.tpot_ms,
        "prompt_tokens": tokens("prompt_tokens"),
        "cached_tokens": tokens("cached_tokens"),
        "completion_tokens": tokens("completion_tokens"),
    }
