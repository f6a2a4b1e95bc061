"""Merging stage records into one request record, and the record's filterable columns (see `records.py`)."""

from __future__ import annotations

from typing import Any

from libs.store.sql import now_ms
from schemas import StageRecord, subjects


def _rank(stage: str) -> int:
    return subjects.STAGES.index(stage) if stage in subjects.STAGES else -1


def merge_stage(record: dict[str, Any], stage: StageRecord) -> dict[str, Any]:
    """`record` with one stage's part merged in; applying the same stage twice gives the same record."""
    out = dict(record)
    decision = dict(stage.decision)
    top = decision.pop("record", None)
    stages = dict(out.get("stages") or {})
    stages[stage.stage] = {
        "replica": stage.replica,
        "started_ms": stage.started_ms,
        "duration_ms": stage.duration_ms,
        "status": stage.status,
        "decision": decision,
        "error": stage.error.model_dump(mode="json") if stage.error else None,
    }
    out["stages"] = stages
    if isinstance(top, dict):
        top = dict(top)
        if stage.stage == "gateway" and "ttft_ms" in top:
            # The gateway's is the client's wait for the first event; the engine's own TTFT keeps `ttft_ms`.
            top["client_ttft_ms"] = top.pop("ttft_ms")
        sources = dict(out.get("sources") or {})
        for k, v in top.items():
            if k in ("stages", "sources"):
                continue
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


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """The filterable columns of a record."""
    stages: dict[str, dict[str, Any]] = record.get("stages") or {}
    starts = [s["started_ms"] for s in stages.values()]
    ends = [s["started_ms"] + s["duration_ms"] for s in stages.values()]
    created = min(starts) if starts else now_ms()
    status = record.get("status")
    if not isinstance(status, str):
        status = "error" if any(s["status"] == "error" for s in stages.values()) else "running"
    usage = record.get("usage") if isinstance(record.get("usage"), dict) else {}
    assert isinstance(usage, dict)

    def tokens(key: str) -> int | None:
        v = _num(usage.get(key))
        return None if v is None else int(v)

    model = record.get("model")
    api = record.get("api")
    replay_of = record.get("replay_of")
    route = record.get("route") if isinstance(record.get("route"), dict) else {}
    assert isinstance(route, dict)
    mode = record.get("mode") or route.get("mode")
    action = record.get("safety_action")
    so = record.get("safety_out") if isinstance(record.get("safety_out"), dict) else {}
    assert isinstance(so, dict)
    if so.get("blocked"):
        action = "block"
    return {
        "tenant": str(record.get("tenant") or ""),
        "trace_id": str(record.get("trace_id") or ""),
        "status": status[:32],
        "model": str(model)[:200] if model else None,
        "api": str(api)[:32] if api else None,
        "replay_of": str(replay_of) if replay_of else None,
        "mode": str(mode)[:16] if mode else None,
        "safety_action": str(action)[:16] if action else None,
        "created_ms": int(created),
        "latency_ms": (max(ends) - created) if ends else None,
        "ttft_ms": _num(usage.get("ttft_ms")),
        "tpot_ms": _num(usage.get("tpot_ms")),
        "prompt_tokens": tokens("prompt_tokens"),
        "cached_tokens": tokens("cached_tokens"),
        "completion_tokens": tokens("completion_tokens"),
    }
