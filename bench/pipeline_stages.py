"""Where the time before the first byte goes, read from one request's spans.

The path is cut at points every request passes: the client sends; each stage's consumer span
starts (context, safety_in, router, tools, inference); inference's model call starts once the
safety_out handshake is answered; the engine's first token (the `gen_ai.first_token` span event);
the gateway's first event (its record's `first_event_ms`); the client's first content byte. A
stage's share is the wall time from its point to the next one, taken past the latest point seen so
far, so the shares add up to the client's TTFT even when stages overlap, and a point that is missing
hands its time to the stage before it. Its own span is the stage's work alone; the difference is
the hop to the next stage.
"""

from __future__ import annotations

from typing import Any

from bench.pipeline_client import Sample

STAGES = (
    "gateway",
    "context",
    "safety_in",
    "router",
    "tools",
    "safety_out handshake",
    "inference queue + prefill",
    "safety_out release",
    "relay",
)
# The services whose consumer span opens a stage, in pipeline order.
CONSUMERS = ("context", "safety_in", "router", "tools", "inference")


def _span(spans: list[dict[str, Any]], service: str, pred: Any) -> dict[str, Any] | None:
    found = [s for s in spans if s.get("service") == service and pred(s)]
    return min(found, key=lambda s: s["start_ns"]) if found else None


def _ms(a: int | None, b: int | None) -> float | None:
    return (b - a) / 1e6 if a is not None and b is not None else None


def first_byte_path(s: Sample) -> dict[str, tuple[float | None, float | None]]:
    """Per stage: (its own span in ms, the ms it adds before the client's first byte)."""
    spans = s.spans
    consumer = {
        name: _span(spans, name, lambda sp: str(sp.get("name", "")).startswith("process ")) for name in CONSUMERS
    }
    handshake = _span(spans, "safety_out", lambda sp: str(sp.get("name", "")).startswith("process "))
    chat = _span(spans, "inference", lambda sp: sp.get("kind") == "client")
    server = _span(spans, "gateway", lambda sp: sp.get("kind") == "server")
    first_token = None
    for e in (chat or {}).get("events") or []:
        if e.get("name") == "gen_ai.first_token":
            first_token = e.get("time_ns")
    gw_first = (s.record.get("gateway") or {}).get("first_event_ms")
    gw_first_ns = int(server["start_ns"] + gw_first * 1e6) if server and isinstance(gw_first, int | float) else None

    def start(sp: dict[str, Any] | None) -> int | None:
        return int(sp["start_ns"]) if sp else None

    def own(sp: dict[str, Any] | None) -> float | None:
        return (sp["end_ns"] - sp["start_ns"]) / 1e6 if sp else None

    # (stage, the point where it starts, its own span)
    path: list[tuple[str, int | None, float | None]] = [
        ("gateway", s.t_send_ns, None),
        ("context", start(consumer["context"]), own(consumer["context"])),
        ("safety_in", start(consumer["safety_in"]), own(consumer["safety_in"])),
        ("router", start(consumer["router"]), own(consumer["router"])),
        ("tools", start(consumer["tools"]), own(consumer["tools"])),
        ("safety_out handshake", start(consumer["inference"]), own(handshake)),
        ("inference queue + prefill", start(chat), s.engine_ttft_ms),
        ("safety_out release", first_token, None),
        ("relay", gw_first_ns, None),
    ]
    end = s.delta_ns[0] if s.delta_ns else None
    out: dict[str, tuple[float | None, float | None]] = {}
    reached = s.t_send_ns
    for i, (name, point, own_ms) in enumerate(path):
        if point is None:
            out[name] = (own_ms, None)
            continue
        nxt = next((p for _, p, _ in path[i + 1 :] if p is not None), end)
        reached = max(reached, point)
        adds = max(0.0, _ms(reached, nxt) or 0.0) if nxt is not None else None
        if nxt is not None:
            reached = max(reached, nxt)
        out[name] = (own_ms, adds)
    return out
