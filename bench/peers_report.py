"""The peers benchmark's summary of one point (a server at a level and workload) and its markdown section."""

from __future__ import annotations

from typing import Any

from bench.engine_bench import fmt, ratio
from bench.pipeline_report import pct
from bench.sse_client import Streamed

MARK_BEGIN = "<!-- peers_bench:begin -->"
MARK_END = "<!-- peers_bench:end -->"
# Widest first: the figures differ several-fold between these CPU classes.
CPU_CLASSES = (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def cpu_class(flags: frozenset[str]) -> str:
    """AMX, AVX-512 or AVX2 (the widest the flags show), else 'no AVX2'."""
    return next((name for flag, name in CPU_CLASSES if flag in flags), "no AVX2")


def tokens_of(s: Streamed) -> int:
    """Completion tokens as the server counted them (its usage), else the deltas the client saw."""
    return s.completion_tokens or len(s.delta_ns)


# Switchyard's output guard stopping an answer ends its stream with this error: a verdict on the text, not a
# failure to serve. With EOS ignored the small model writes on past its turn (word problems such as "10 of
# them are female.", which the classifier alone scores S4 at 0.99): counted apart from the errors.
STOPPED_BY_SAFETY = '"code":"content_blocked"'


def stopped_by_safety(s: Streamed) -> bool:
    return s.error is not None and STOPPED_BY_SAFETY in s.error


def summarize(samples: list[Streamed], wall_s: float) -> dict[str, Any]:
    # A stopped answer's tokens are left out of tok/s and latencies too (it is shorter than the others).
    ok = [s for s in samples if s.error is None and s.delta_ns]
    stopped = [s for s in samples if stopped_by_safety(s)]
    tokens = sum(tokens_of(s) for s in ok)
    ttft = [s.ttft_ms for s in ok]
    return {
        "requests": len(samples),
        "errors": len(samples) - len(ok) - len(stopped),
        "stopped_by_safety": len(stopped),
        "first_errors": [s.error for s in samples if s.error is not None and not stopped_by_safety(s)][:3],
        "first_stopped": [s.error for s in stopped][:3],
        "completion_tokens": tokens,
        "tokens_per_request": sorted({tokens_of(s) for s in ok}),
        "wall_s": wall_s,
        "tok_s": tokens / wall_s if wall_s > 0 else None,
        "ttft_ms": {"p50": pct(ttft, 0.5), "p95": pct(ttft, 0.95)},
        "tpot_ms": {"p50": pct([s.itl_ms for s in ok], 0.5)},
        # Few deltas per request mean tokens arrive grouped (a busy server or relay), which TPOT alone hides.
        "deltas_per_request_p50": pct([len(s.delta_ns) for s in ok], 0.5),
    }


def render(r: dict[str, Any]) -> str:
    """`r`: the run's record (bench/peers_bench.py): meta, servers, and points[workload][level][server]."""
    servers = list(r["servers"])
    lines = [
        MARK_BEGIN,
        "### Peers",
        "",
        "Switchyard's whole stack against llama.cpp's `llama-server` and vLLM's OpenAI server on the same box, "
        "one client for all (streamed `/v1/chat/completions`, greedy, `ignore_eos`, a fresh nonce at the start of "
        "every prompt, after the chat template's fixed system line, which any server may cache), servers "
        "alternated point by point, the first of each turn rotating; llama-server and vLLM are held (SIGSTOP) "
        "while another server has its turn, since vLLM's CPU worker polls about a core while idle.",
        "",
        f"- date: {r['date']}; command: `{r['command']}`",
        f"- machine: {r['machine']}; CPU class **{r['cpu_class']}**; load average at start {r['load']}",
        f"- model: {r['model']}; requests per point: {r['requests_note']}",
    ]
    if r.get("smoke"):
        lines.append(
            "- **a smoke run** (fewer requests or tokens than the defaults): it proves the pipeline, it measures nothing"
        )
    for name, s in r["servers"].items():
        if "error" in s:
            lines.append(f"- {name}: **did not run**: {s['error'].splitlines()[0][:200]}")
            continue
        notes = ", ".join(f"{k} {v}" for k, v in s.get("notes", {}).items())
        lines.append(f"- {name}: {notes}; ready in {fmt(s.get('ready_s'))} s; `{s['command']}`")
    lines += [
        "",
        "tok/s: completion tokens over the point's wall time; TTFT: request sent to first content delta; TPOT: "
        "first delta to last over the tokens after the first; ×: tok/s over Switchyard's in the same point; errors: "
        "streams that failed, and (in brackets) answers Switchyard's output guard stopped, whose tokens count in "
        "neither tok/s nor the latencies.",
        "",
        "| workload | streams | server | tok/s | × | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | tokens/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, levels in r["points"].items():
        for level, by_server in levels.items():
            ours = (by_server.get("switchyard") or {}).get("tok_s")
            for name in servers:
                p = by_server.get(name)
                if p is None:
                    continue
                per_req = "/".join(str(n) for n in p["tokens_per_request"]) or "-"
                stopped = f" ({p['stopped_by_safety']} stopped by output safety)" if p.get("stopped_by_safety") else ""
                lines.append(
                    f"| {workload} | {level} | {name} | {fmt(p['tok_s'])} | {fmt(ratio(p['tok_s'], ours), 'x')} | "
                    f"{fmt(p['ttft_ms']['p50'])} | {fmt(p['ttft_ms']['p95'])} | {fmt(p['tpot_ms']['p50'])} | "
                    f"{per_req} | {p['errors']}/{p['requests']}{stopped} |"
                )
    lines += ["", MARK_END, ""]
    return "\n".join(lines)
