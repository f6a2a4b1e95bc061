"""The raw text inside a request record: hiding it (opted-out tenants, retention) and exporting it.

A record holds user text in a few known places (the request, the assembled prompt, tool outputs, the
model's output, redaction matches). `scrub` replaces each with its SHA-256 and length, so an operator
can still see sizes and spot identical prompts without ever storing what was said.
"""

from __future__ import annotations

import hashlib
from typing import Any

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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def dataset_row(rid: str, summary: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """One logged request as a dataset line: what was asked, the prompt, the answer, and how it went."""
    req = record.get("request") if isinstance(record.get("request"), dict) else {}
    assert isinstance(req, dict)
    route = record.get("route") if isinstance(record.get("route"), dict) else {}
    assert isinstance(route, dict)
    return {
        "rid": rid,
        "tenant": summary.get("tenant"),
        "created_ms": summary.get("created_ms"),
        "api": summary.get("api"),
        "model": summary.get("model"),
        "mode": summary.get("mode") or route.get("mode"),
        "status": summary.get("status"),
        "finish_reason": record.get("finish_reason"),
        "replay_of": summary.get("replay_of"),
        "chat_id": req.get("chat_id"),
        "text": req.get("text"),
        "messages": req.get("messages") or [],
        "system": req.get("system"),
        "prompt": record.get("prompt"),
        "output": record.get("released", record.get("output")),
        "raw_output": record.get("raw_output"),
        "thinking": record.get("thinking") or None,
        "sampling": record.get("sampling") or req.get("sampling"),
        "tools": record.get("tools") or [],
        "safety_action": summary.get("safety_action"),
        "usage": record.get("usage") or {},
        "ttft_ms": summary.get("ttft_ms"),
        "tpot_ms": summary.get("tpot_ms"),
        "feedback": record.get("feedback") or [],
    }


def answer_text(record: dict[str, Any]) -> str:
    """What the user saw (after output redaction), else what the model wrote."""
    return _text(record.get("released")) or _text(record.get("output")) or _text(record.get("raw_output"))
