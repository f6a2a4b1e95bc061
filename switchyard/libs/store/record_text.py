"""The raw text inside a request record: hiding it (opted-out tenants, retention) and exporting it.

A record holds user text in a few known places (the request, the assembled prompt, tool outputs, the
model's output, redaction matches). `scrub` replaces each with its SHA-256 and length, so an operator
can still see sizes and spot identical prompts without ever storing what was said.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel

from switchyard.schemas import RecordedRequest, RequestRecord, RequestSummary
from switchyard.schemas.records import Text

# Top-level keys that hold text the user or the model wrote.
TEXT_KEYS = ("prompt", "output", "released", "raw_output", "thinking")
REQUEST_TEXT_KEYS = ("text", "system")


def digest(text: str) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), "chars": len(text)}


def _hide(value: Any) -> Any:
    if isinstance(value, str):
        return digest(value)
    return value


def scrub(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every raw text replaced by its digest; applying it twice changes nothing."""
    out = dict(record)
    for key in TEXT_KEYS:
        if key in out:
            out[key] = _hide(out[key])
    req = out.get("request")
    if isinstance(req, dict):
        req = dict(req)
        for key in REQUEST_TEXT_KEYS:
            if key in req:
                req[key] = _hide(req[key])
        if isinstance(req.get("messages"), list):
            req["messages"] = [
                {**m, "content": _hide(m.get("content"))} if isinstance(m, dict) else m for m in req["messages"]
            ]
        out["request"] = req
    if isinstance(out.get("tools"), list):
        out["tools"] = [
            {**t, "output": _hide(t.get("output")), "arguments": {}} if isinstance(t, dict) else t for t in out["tools"]
        ]
    if isinstance(out.get("mcp_rounds"), list):
        # The MCP calls the model wrote: their arguments, results and the fenced result it was given.
        out["mcp_rounds"] = [_scrub_round(r) if isinstance(r, dict) else r for r in out["mcp_rounds"]]
    if isinstance(out.get("safety_in"), list):
        # A verdict's detail can quote the message it judged.
        out["safety_in"] = [
            {**v, "detail": _hide(v.get("detail"))} if isinstance(v, dict) else v for v in out["safety_in"]
        ]
    so = out.get("safety_out")
    if isinstance(so, dict) and isinstance(so.get("redactions"), list):
        # Redactions carry the matched secret or PII itself; keep only what kind it was.
        so = dict(so)
        so["redactions"] = [
            {k: v for k, v in r.items() if k in ("kind", "category", "start", "end")} if isinstance(r, dict) else {}
            for r in so["redactions"]
        ]
        out["safety_out"] = so
    return out


def _scrub_round(entry: dict[str, Any]) -> dict[str, Any]:
    out = {**entry, "prompt": _hide(entry.get("prompt"))}
    event = entry.get("event")
    if isinstance(event, dict):
        out["event"] = {**event, "output": _hide(event.get("output")), "arguments": {}}
    if isinstance(entry.get("verdicts"), list):
        out["verdicts"] = [
            {**v, "detail": _hide(v.get("detail"))} if isinstance(v, dict) else v for v in entry["verdicts"]
        ]
    return out


def _plain(value: Any) -> Any:
    """A stored value as it was stored: a model back to the JSON it was read from."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    return value


def _text(value: Text | None) -> str:
    return value if isinstance(value, str) else ""


def dataset_row(summary: RequestSummary, record: RequestRecord, feedback: list[dict[str, Any]]) -> dict[str, Any]:
    """One logged request as a dataset line: what was asked, the prompt, the answer, and how it went."""
    req = record.request or RecordedRequest()
    sampling = record.sampling or req.sampling
    # What the user saw when output safety reported it (even empty: an answer held back), else the model's.
    output = record.released if "released" in record.model_fields_set else record.output
    # `tools` stays as stored (scrubbing rewrites it), an extra field of the record.
    tools = getattr(record, "tools", None)
    return {
        "rid": summary.rid,
        "tenant": summary.tenant,
        "created_ms": summary.created_ms,
        "api": summary.api,
        "model": summary.model,
        "mode": summary.mode or (record.route.mode if record.route else None),
        "status": summary.status,
        "finish_reason": record.finish_reason,
        "replay_of": summary.replay_of,
        "chat_id": req.chat_id,
        "text": _plain(req.text) if "text" in req.model_fields_set else None,
        "messages": req.messages,
        "system": _plain(req.system),
        "prompt": _plain(record.prompt),
        "output": _plain(output),
        "raw_output": _plain(record.raw_output),
        "thinking": _plain(record.thinking) or None,
        "sampling": _plain(sampling),
        "tools": tools or [],
        "safety_action": summary.safety_action,
        "usage": _plain(record.usage) or {},
        "ttft_ms": summary.ttft_ms,
        "tpot_ms": summary.tpot_ms,
        "feedback": feedback,
    }


def answer_text(record: RequestRecord) -> str:
    """What the user saw (after output redaction), else what the model wrote."""
    return _text(record.released) or _text(record.output) or _text(record.raw_output)
