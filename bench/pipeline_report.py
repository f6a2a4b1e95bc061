"""The pipeline benchmark's summary (per level p50/p95, the stage breakdown, the targets) and its markdown.

`r` is the native stack's summary; where the vLLM peer ran, `r["vllm"]` is the same summary for the
stack on a vLLM replica (plus its load, readiness and eager flag, or a `note` where it failed), and
its rows are rendered beside the native ones with ratios (vLLM / native) of the same run."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from bench.engine_bench import fmt, ratio
from bench.pipeline_client import Sample
from bench.pipeline_stages import STAGES, first_byte_path
from bench.report import machine

MARK_BEGIN = "<!-- pipeline_bench:begin -->"
MARK_END = "<!-- pipeline_bench:end -->"


def pct(values: list[float | None], q: float) -> float | None:
    """The q-quantile, linearly interpolated; None for no data."""
    xs = sorted(x for x in values if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(samples: dict[int, list[Sample]], engine: dict[str, Any]) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    for level, ss in samples.items():
        ok = [s for s in ss if s.ok]
        start = min((s.t_send_ns for s in ss), default=0)
        end = max((s.t_end_ns for s in ss), default=0)
        tokens = sum(s.tokens or 0 for s in ok)

        def both(xs: list[float | None]) -> dict[str, float | None]:
            return {"p50": pct(xs, 0.5), "p95": pct(xs, 0.95)}

        paths = [first_byte_path(s) for s in ok]
        stages = {
            name: {
                "own_p50": pct([p[name][0] for p in paths], 0.5),
                "adds_p50": pct([p[name][1] for p in paths], 0.5),
            }
            for name in STAGES
        }
        alone = engine.get("levels", {}).get(str(level), {})
        levels[str(level)] = {
            "requests": len(ss),
            "errors": [s.error for s in ss if not s.ok][:5],
            "error_count": len(ss) - len(ok),
            "client_ttft_ms": both([s.client_ttft_ms for s in ok]),
            "engine_ttft_ms": both([s.engine_ttft_ms for s in ok]),
            "added_ttft_ms": both([s.added_ttft_ms for s in ok]),
            "engine_tpot_ms": both([s.engine_tpot_ms for s in ok]),
            "gap_ms": both([g for s in ok for g in s.gaps_ms]),
            "deltas_per_token": {
                **both([s.deltas_per_token for s in ok]),
                "min": min((d for s in ok if (d := s.deltas_per_token) is not None), default=None),
            },
            "completion_tokens": sorted({s.tokens for s in ok if s.tokens is not None}),
            "api_tok_s": tokens / ((end - start) / 1e9) if end > start else None,
            "stages": stages,
            # Each request, for profiles: the rid finds its record and spans in the console.
            "per_request": [
                {
                    "rid": s.rid,
                    "client_ttft_ms": s.client_ttft_ms,
                    "engine_ttft_ms": s.engine_ttft_ms,
                    "deltas": len(s.delta_ns),
                    "tokens": s.tokens,
                    "error": s.error,
                    "adds_ms": {k: v[1] for k, v in first_byte_path(s).items()} if s.ok else None,
                }
                for s in ss
            ],
            "engine_alone": {
                "tok_s": alone.get("tok_s"),
                "ttft_ms": both(alone.get("ttft_ms", [])),
                "tpot_ms": both(alone.get("tpot_ms", [])),
            },
        }
    return {"levels": levels, "engine": {k: v for k, v in engine.items() if k != "levels"}}


def command(argv: list[str]) -> str:
    """The arguments that shape the figures: where they were written (--json) says nothing about them."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    return " ".join(out)


def streams(level: int | str) -> str:
    return f"{level} stream{'' if int(level) == 1 else 's'}"


def pair(d: dict[str, float | None], digits: int = 0) -> str:
    p50, p95 = d.get("p50"), d.get("p95")
    if p50 is None:
        return "-"
    return f"{p50:.{digits}f} / {p95:.{digits}f}" if p95 is not None else f"{p50:.{digits}f}"


# The p50s (or throughputs) the vLLM peer is compared on, as (column, path into a level's summary).
COMPARED = (
    ("client TTFT", ("client_ttft_ms", "p50")),
    ("engine TTFT", ("engine_ttft_ms", "p50")),
    ("pipeline-added TTFT", ("added_ttft_ms", "p50")),
    ("engine TPOT", ("engine_tpot_ms", "p50")),
    ("API tok/s", ("api_tok_s",)),
    ("engine alone tok/s", ("engine_alone", "tok_s")),
)


def _at(level: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        level = level.get(key) if isinstance(level, dict) else None  # type: ignore[assignment]
    return level


def vllm_levels(r: dict[str, Any]) -> dict[str, Any]:
    """The vLLM peer's levels, or none where it did not run (or failed)."""
    levels: dict[str, Any] = (r.get("vllm") or {}).get("levels") or {}
    return levels


def compare(r: dict[str, Any]) -> dict[str, list[float | None]]:
    """Per level both stacks ran: vLLM / native for each COMPARED figure (None where either lacks it)."""
    peer = vllm_levels(r)
    return {
        level: [ratio(_at(peer[level], path), _at(v, path)) for _, path in COMPARED]
        for level, v in r["levels"].items()
        if level in peer
    }


def targets(r: dict[str, Any]) -> list[tuple[str, float | None, str, bool | None]]:
    lv = r["levels"]
    one = lv.get("1", {})
    big = "32" if "32" in lv else max(lv, key=int)
    at = lv[big]
    added1 = one.get("added_ttft_ms", {}).get("p50")
    share = ratio(at["added_ttft_ms"]["p50"], at["engine_ttft_ms"]["p50"])
    dpt = [v["deltas_per_token"]["p50"] for v in lv.values() if v["deltas_per_token"]["p50"] is not None]
    worst = max(dpt, key=lambda d: abs(d - 1)) if dpt else None
    tput = ratio(at["api_tok_s"], at["engine_alone"]["tok_s"])
    return [
        ("pipeline-added TTFT p50 at 1 stream (ms)", added1, "≤ 30", None if added1 is None else added1 <= 30),
        (
            f"pipeline-added TTFT p50 at {big} streams / the engine's TTFT p50",
            share,
            "≤ 0.15",
            None if share is None else share <= 0.15,
        ),
        (
            "deltas per token p50, the level furthest from 1",
            worst,
            "≈ 1 (0.9-1.1)",
            None if worst is None else 0.9 <= worst <= 1.1,
        ),
        (
            f"API tok/s at {big} streams vs the engine alone at {big}",
            tput,
            "≥ 0.9x",
            None if tput is None else tput >= 0.9,
        ),
    ]


def reading(r: dict[str, Any]) -> str:
    lv = r["levels"]
    lo, hi = min(lv, key=int), ("32" if "32" in lv else max(lv, key=int))
    a, b = lv[lo], lv[hi]
    stages = {k: v["adds_p50"] for k, v in a["stages"].items() if v["adds_p50"] is not None}
    top = sorted(stages.items(), key=lambda kv: -kv[1])[:3]
    parts = [
        f"At {streams(lo)} a client waits {fmt(a['client_ttft_ms']['p50'])} ms (p50) for the first content byte while the "
        f"engine's own TTFT is {fmt(a['engine_ttft_ms']['p50'])} ms: the pipeline adds {fmt(a['added_ttft_ms']['p50'])} ms. "
        "Most of the time before the first byte goes to " + ", ".join(f"{k} ({v:.0f} ms)" for k, v in top) + "."
    ]
    d = a["deltas_per_token"]["p50"]
    if d is not None:
        parts.append(
            "Tokens reach the client one delta per token."
            if 0.9 <= d <= 1.1
            else f"Tokens reach the client coalesced: {d:.2f} deltas per token ({1 / d:.1f} tokens per delta)."
            if d
            else "No token reached the client as a delta."
        )
    t = ratio(b["api_tok_s"], b["engine_alone"]["tok_s"])
    parts.append(
        f"At {streams(hi)} the API serves {fmt(b['api_tok_s'])} tok/s against {fmt(b['engine_alone']['tok_s'])} for the "
        f"engine alone ({fmt(t, 'x')}), and the pipeline adds {fmt(b['added_ttft_ms']['p50'])} ms to an engine TTFT of "
        f"{fmt(b['engine_ttft_ms']['p50'])} ms (p50)."
    )
    return " ".join(p for p in parts if p)


def vllm_reading(r: dict[str, Any]) -> str:
    lv, peer = r["levels"], vllm_levels(r)
    lo = min(peer, key=int)
    hi = "32" if "32" in peer else max(peer, key=int)
    a, b = peer[lo], peer[hi]
    return (
        f"On the vLLM replica a client waits {fmt(a['client_ttft_ms']['p50'])} ms (p50) for the first byte at "
        f"{streams(lo)} ({fmt(ratio(a['client_ttft_ms']['p50'], lv[lo]['client_ttft_ms']['p50']), 'x')} the native "
        f"stack's), the pipeline adding {fmt(a['added_ttft_ms']['p50'])} ms to vLLM's own "
        f"{fmt(a['engine_ttft_ms']['p50'])}; at {streams(hi)} the API serves {fmt(b['api_tok_s'])} tok/s "
        f"({fmt(ratio(b['api_tok_s'], lv[hi]['api_tok_s']), 'x')} the native stack's) against "
        f"{fmt(b['engine_alone']['tok_s'])} for vLLM alone ({fmt(ratio(b['api_tok_s'], b['engine_alone']['tok_s']), 'x')})."
    )


def yes(met: bool | None) -> str:
    return "-" if met is None else ("yes" if met else "no")


def row(label: str, v: dict[str, Any]) -> str:
    """One level of one stack in the main table."""
    d = v["deltas_per_token"]
    dpt = "-" if d["p50"] is None else f"{d['p50']:.2f} ({d['min']:.2f})"
    return (
        f"| {label} | {v['requests']} | {pair(v['client_ttft_ms'])} | {pair(v['engine_ttft_ms'])} | "
        f"{pair(v['added_ttft_ms'])} | {pair(v['engine_tpot_ms'], 1)} | {pair(v['gap_ms'], 1)} | {dpt} | "
        f"{fmt(v['api_tok_s'])} | {fmt(v['engine_alone']['tok_s'])} | "
        f"{fmt(ratio(v['api_tok_s'], v['engine_alone']['tok_s']), 'x')} | {pair(v['engine_alone']['ttft_ms'])} | "
        f"{v['error_count']} |"
    )


def seconds(v: Any) -> str:
    return f"{v:.0f} s" if isinstance(v, int | float) else "-"


def vllm_header(r: dict[str, Any]) -> list[str]:
    """What the vLLM peer was, in the section's list of conditions (nothing where it did not run)."""
    v = r.get("vllm")
    if not v:
        return []
    eng = v.get("engine") or {}
    mode = (
        "eager (`SWITCHYARD_VLLM_ENFORCE_EAGER=1`: no start-up compile, about 10 % slower decode)"
        if v.get("eager", True)
        else "compiled at start-up"
    )
    lines = [
        "- vLLM replica, a peer in the same run: the same stack and load, its inference service run by the vLLM "
        f"virtualenv's python (`make setup-vllm`) with `SWITCHYARD_INFERENCE_ENGINE=vllm`; vLLM "
        f"{eng.get('version', '-')} CPU build, weights {eng.get('dtype', '-')} (the HF checkpoint written from the "
        f"GGUF), {mode}, its own core binding; vLLM alone (the same worker, that python) loads in "
        f"{seconds(eng.get('load_s'))}, the stack was ready in {seconds(v.get('ready_s'))} (native: "
        f"{seconds(r.get('ready_s'))}); load average at start {eng.get('load', '-')} (vLLM alone), "
        f"{v.get('load', '-')} (stack)"
    ]
    lines += [f"- vLLM alone: {eng['note']}"] if eng.get("note") else []
    lines += [f"- vLLM replica: {v['note']}"] if v.get("note") else []
    return lines


def render(tokens: int, r: dict[str, Any]) -> str:
    lv = r["levels"]
    eng = r["engine"]
    lines = [
        MARK_BEGIN,
        "### Pipeline benchmark",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}; engine threads {eng.get('threads', '-')} (as the inference service), "
        f"weights {eng.get('dtype', '-')} (the engine alone resolves `auto`, the stack is pinned to it); "
        f"load average at start {eng.get('load', '-')} (engine alone), {r['load']} (stack)",
        f"- command: `python -m bench.pipeline_bench {command(sys.argv[1:])}`",
        f"- {tokens} tokens per request (EOS ignored, greedy), distinct prompts, `level` streams open at every "
        "moment over one HTTP client; the stack as `make run` starts it (the dev key's rate limits raised); "
        "the engine alone runs first, in its own process, on the prompts the context stage renders for the same "
        "texts, at the same concurrency",
        *(
            [f"- {r['prompts_differing']} recorded prompts differ from the engine alone's"]
            if r.get("prompts_differing")
            else []
        ),
        *([f"- engine alone: {eng['note']}"] if eng.get("note") else []),
        *vllm_header(r),
        "",
        "| streams | requests | client TTFT ms p50 / p95 | engine TTFT ms | pipeline-added TTFT ms | engine TPOT ms "
        "| delta gap ms | deltas per token p50 (min) | API tok/s | engine alone tok/s | API / engine | "
        "engine alone TTFT ms | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    peer = vllm_levels(r)
    for level, v in lv.items():
        lines.append(row(level, v))
        if level in peer:
            lines.append(row(f"{level} (vLLM)", peer[level]))
    ratios = compare(r)
    if ratios:
        lines += [
            "",
            "The vLLM replica against the native one, same run (vLLM / native; p50s, tok/s; below 1 is faster "
            "for a TTFT or TPOT, slower for a tok/s):",
            "",
            "| streams | " + " | ".join(name for name, _ in COMPARED) + " |",
            "|---|" + "---|" * len(COMPARED),
        ]
        for level, rs in ratios.items():
            lines.append(f"| {level} | " + " | ".join(fmt(x, "x") for x in rs) + " |")
    lines += ["", "Targets" + (" (the native stack's; the vLLM replica's beside them)" if peer else "") + ":", ""]
    if peer:
        lines += ["| target | measured | met | vLLM replica | met | wanted |", "|---|---|---|---|---|---|"]
        for (name, val, want, met), (_, pval, _, pmet) in zip(targets(r), targets(r["vllm"]), strict=True):
            lines.append(f"| {name} | {fmt(val)} | {yes(met)} | {fmt(pval)} | {yes(pmet)} | {want} |")
    else:
        lines += ["| target | measured | wanted | met |", "|---|---|---|---|"]
        for name, val, want, met in targets(r):
            lines.append(f"| {name} | {fmt(val)} | {want} | {yes(met)} |")
    lines += [
        "",
        "Before the first byte, per stage (p50 ms: its own span / its share of the client's TTFT). Shares follow "
        "the critical path: overlapping work is charged to the span that ends last, a hop to the stage before it, "
        "so a stage running beside another's work adds nothing and the shares add up to the TTFT "
        "(bench/pipeline_stages.py):",
        "",
        "| stage | "
        + " | ".join(streams(level) for level in lv)
        + "".join(f" | {streams(x)} (vLLM)" for x in peer)
        + " |",
        "|---|" + "---|" * (len(lv) + len(peer)),
    ]
    for name in STAGES:
        cells = []
        for v in [*lv.values(), *peer.values()]:
            st = v["stages"][name]
            own = "-" if st["own_p50"] is None else f"{st['own_p50']:.1f}"
            adds = "-" if st["adds_p50"] is None else f"{st['adds_p50']:.1f}"
            cells.append(f"{own} / {adds}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", reading(r), *(["", vllm_reading(r)] if ratios else []), "", MARK_END, ""]
    return "\n".join(lines)
