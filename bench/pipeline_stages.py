"""Where the time before the first byte goes, read from one request's spans.

Each stage is an interval on the wall clock between the client's send and its first content byte:
the consumer spans of context, safety_in, router and tools (the work itself), and the waits between
points every request passes: the gateway (send → the first stage starts), the safety_out handshake
(inference's consumer span starts → its model call starts), inference queue + prefill (the model
call starts → the engine's first token, the `gen_ai.first_token` span event), safety_out release
(first token → the gateway's first event, its record's `first_event_ms`) and the relay (→ the
client's first byte). Every moment of the wait is charged to one stage: where stages overlap, to
the work span that ends last (the one the path waits on), else to the wait; between stages, to the
stage that ended last (the hop after it). So the shares add up to the client's TTFT whatever order
the stages run in, and a stage that runs beside another's work adds nothing.
"""

from __future__ import annotations

import itertools
from typing import Any

from bench.pipeline_client import CONSUMERS, Sample

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


def _span(spans: list[dict[str, Any]], service: str, pred: Any) -> dict[str, Any] | None:
    found = [s for s in spans if s.get("service") == service and pred(s)]
    return min(found, key=lambda s: s["start_ns"]) if found else None


def first_byte_path(s: Sample) -> dict[str, tuple[float | None, float | None]]:
    """Per stage: (its own span in ms, the ms it adds before the client's first byte)."""
    spans = s.spans
    work = {name: _span(spans, name, lambda sp: str(sp.get("name", "")).startswith("process ")) for name in CONSUMERS}
    handshake = _span(spans, "safety_out", lambda sp: str(sp.get("name", "")).startswith("process "))
    chat = _span(spans, "inference", lambda sp: sp.get("kind") == "client")
    server = _span(spans, "gateway", lambda sp: sp.get("kind") == "server")
    first_token = next(
        (int(e["time_ns"]) for e in (chat or {}).get("events") or [] if e.get("name") == "gen_ai.first_token"),
        None,
    )
    gw_first = (s.record.get("gateway") or {}).get("first_event_ms")
    gw_first_ns = int(server["start_ns"] + gw_first * 1e6) if server and isinstance(gw_first, int | float) else None
    t0 = s.t_send_ns
    t1 = s.delta_ns[0] if s.delta_ns else None
    inference = work.pop("inference")

    def own(sp: dict[str, Any] | None) -> float | None:
        return (sp["end_ns"] - sp["start_ns"]) / 1e6 if sp else None

    spans_own = {name: own(sp) for name, sp in work.items()}
    spans_own["safety_out handshake"] = own(handshake)
    spans_own["inference queue + prefill"] = s.engine_ttft_ms
    if t1 is None:
        return {name: (spans_own.get(name), None) for name in STAGES}
    # (stage, start, end, is work): the work spans win a moment over the waits they overlap.
    starts = [int(sp["start_ns"]) for sp in work.values() if sp] + ([int(inference["start_ns"])] if inference else [])
    chat_start = int(chat["start_ns"]) if chat else None
    intervals: list[tuple[str, int | None, int | None, bool]] = [
        ("gateway", t0, min(starts, default=None), False),
        *((name, int(sp["start_ns"]), int(sp["end_ns"]), True) for name, sp in work.items() if sp),
        ("safety_out handshake", int(inference["start_ns"]) if inference else None, chat_start, False),
        ("inference queue + prefill", chat_start, first_token, True),
        ("safety_out release", first_token, gw_first_ns or t1, False),
        ("relay", gw_first_ns, t1, False),
    ]
    live = [(n, max(a, t0), min(b, t1), w) for n, a, b, w in intervals if a is not None and b is not None and a < b]
    cuts = sorted({t0, t1, *(a for _, a, _, _ in live if t0 < a < t1), *(b for _, _, b, _ in live if t0 < b < t1)})
    adds = dict.fromkeys(STAGES, 0.0)
    last = "gateway"
    for a, b in itertools.pairwise(cuts):
        active = [iv for iv in live if iv[1] <= a and iv[2] >= b]
        if active:
            name = max(active, key=lambda iv: (iv[3], iv[2]))[0]
        else:  # a hop between stages: the stage that ended last sent it
            ended = [iv for iv in live if iv[2] <= a]
            name = max(ended, key=lambda iv: iv[2])[0] if ended else last
        adds[name] += (b - a) / 1e6
        last = name
    seen = {n for n, *_ in live}
    return {name: (spans_own.get(name), adds[name] if name in seen else None) for name in STAGES}
