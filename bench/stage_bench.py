"""What each stage of the pipeline costs in CPU, per output token and per request, as a client drives it.

    python -m bench.stage_bench --engine sim [--levels 1,32,256,1024] [--lengths 32,128] [--out docs/benchmarks.md]
    python -m bench.stage_bench --engine native --levels 1,32 --lengths 16,64

Starts the stack as `make run` does (switchyard.cli.stack.Stack), each service its own process, and drives
`/v1/chat/completions` with the lean raw-HTTP client of bench/sse_client.py, `level` streams open at
every moment. Around each run it reads every process's CPU time from /proc (user + system, all its
threads): the services, the nats-server, and this process (the load generator, reported apart).
Each level runs twice, at a short and a long answer length with the same number of requests, so a
stage's CPU splits into a cost per request and a cost per token (two equations, two unknowns). With
`--engine sim` the inference replica is the simulated GPU (switchyard/libs/engine/sim.py), whose own CPU is next
to nothing: the figures are the layer around the model, at the token rates a GPU makes.

Reported per level: the rate the clients received, client TTFT and inter-delta gap (p50) against the
engine's own TTFT and TPOT (from a sample of request records), deltas per token, and CPU us per token of
every process; then the per-request / per-token split, the highest rate relayed with the client's gap
p50 within 10 % of the engine's TPOT, and cores per stage per 10,000 tok/s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx

from bench.engine_bench import QUESTIONS
from bench.pipeline_client import Sample, fetch_record
from bench.report import machine, write_section
from bench.sse_client import Streamed, drive

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN, MARK_END = "<!-- stage-bench:{engine} begin -->", "<!-- stage-bench:{engine} end -->"
TICK = os.sysconf("SC_CLK_TCK")
# Records read back per run for the engine's own TTFT and TPOT (every one would load the logger's reader).
RECORD_SAMPLE = 24


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_s(pid: int, prefix: str) -> float:
    """CPU seconds of a process's threads whose kernel name starts with `prefix` (the model passes run on
    a thread named `classifier`, switchyard/libs/embeddings/batcher.py)."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith(prefix):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / TICK
        except OSError:  # the thread ended meanwhile
            continue
    return total


# The MiniLM passes: a model beside the model, reported apart (`<service>/classifier`, part of the service's total).
CLASSIFIED = ("safety_in", "safety_out", "tools")


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    out = {name: cpu_s(pid) for name, pid in pids.items()}
    for name, pid in pids.items():
        if name.split("-")[0] in CLASSIFIED:
            out[f"{name}/classifier"] = thread_cpu_s(pid, "classifier")
    out["load generator"] = time.process_time()
    return out


def stack_env(engine: str) -> dict[str, str]:
    tier = {"requests_per_minute": 1e7, "tokens_per_minute": 1e10, "concurrent_streams": 1 << 16}
    return {
        "SWITCHYARD_INFERENCE_ENGINE": engine,
        "SWITCHYARD_INFERENCE_CACHE_DIR": os.environ.get(
            "SWITCHYARD_INFERENCE_CACHE_DIR", str(ROOT / "var/cache/engine")
        ),
        "SWITCHYARD_GATEWAY_TIERS": json.dumps({"free": tier, "pro": tier}),
        "SWITCHYARD_GATEWAY_MAX_ACTIVE_STREAMS": "8192",
        "SWITCHYARD_GATEWAY_REQUEST_TIMEOUT_S": "900",
        "SWITCHYARD_LOG_LEVEL": "WARNING",
    }


def wait_listening(url: str, key: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", headers={"Authorization": f"Bearer {key}"}).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} never became ready")


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def records(url: str, admin_key: str, got: list[Streamed]) -> list[Sample]:
    """The engine's own figures for a sample of the run's requests."""
    picked = [g for g in got if g.rid][:: max(1, len(got) // RECORD_SAMPLE)][:RECORD_SAMPLE]
    samples = [Sample(rid=g.rid, text="", t_send_ns=g.t_send_ns) for g in picked]
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await asyncio.gather(*(fetch_record(client, admin_key, s, timeout_s=60) for s in samples))
    return samples


async def run_level(
    urls: list[str], key: str, admin: str, model: str, pids: dict[str, int], level: int, tokens: int, texts: list[str]
) -> dict[str, Any]:
    before, t0 = snapshot(pids), time.perf_counter()
    got = await drive(urls, key, model, texts, level, tokens)
    wall, after = time.perf_counter() - t0, snapshot(pids)
    received = sum(g.completion_tokens or 0 for g in got if g.error is None)
    recs = await records(urls[0], admin, got)
    gaps = [statistics.median(g.gaps_ms) for g in got if len(g.gaps_ms) >= 2]
    return {
        "level": level,
        "tokens": tokens,
        "requests": len(got),
        "errors": sum(g.error is not None for g in got),
        "error_sample": next((g.error for g in got if g.error), None),
        "received_tokens": received,
        "wall_s": wall,
        "tok_s": received / wall if wall else 0.0,
        "client_ttft_ms": pct([t for g in got if (t := g.ttft_ms) is not None], 0.5),
        "client_ttft_p95_ms": pct([t for g in got if (t := g.ttft_ms) is not None], 0.95),
        "gap_ms": pct(gaps, 0.5),
        "itl_ms": pct([v for g in got if (v := g.itl_ms) is not None], 0.5),
        "deltas_per_token": pct([len(g.delta_ns) / g.completion_tokens for g in got if g.completion_tokens], 0.5),
        "engine_ttft_ms": pct([v for s in recs if (v := s.engine_ttft_ms) is not None], 0.5),
        "engine_tpot_ms": pct([v for s in recs if (v := s.engine_tpot_ms) is not None], 0.5),
        "cpu_s": {name: after[name] - before[name] for name in before},
    }


def plan(levels: list[int], lengths: list[int], per_stream: int) -> list[tuple[int, int, list[str]]]:
    out, n = [], 0
    for level in levels:
        count = max(16, per_stream * level)
        for tokens in lengths:
            out.append(
                (level, tokens, [f"{QUESTIONS[(n + i) % len(QUESTIONS)]} (request {n + i})" for i in range(count)])
            )
            n += count
    return out


def split(short: dict[str, Any], long: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per process: (us per request, us per token), from two runs of the same requests at two lengths."""
    out = {}
    n, t_s, t_l = short["requests"], short["tokens"], long["tokens"]
    for name in short["cpu_s"]:
        per_token = (long["cpu_s"][name] - short["cpu_s"][name]) / (n * (t_l - t_s))
        per_request = short["cpu_s"][name] / n - t_s * per_token
        out[name] = (per_request * 1e6, per_token * 1e6)
    return out


def summarize(runs: list[dict[str, Any]], lengths: list[int]) -> dict[str, Any]:
    by = {(r["level"], r["tokens"]): r for r in runs}
    levels = sorted({r["level"] for r in runs})
    short, long = min(lengths), max(lengths)
    out: dict[str, Any] = {"levels": {}, "relayed_within_10pct": None}
    for level in levels:
        a, b = by[(level, short)], by[(level, long)]
        per_token = {name: cpu / b["received_tokens"] * 1e6 for name, cpu in b["cpu_s"].items() if b["received_tokens"]}
        within = (
            b["itl_ms"] is not None and b["engine_tpot_ms"] is not None and b["itl_ms"] <= 1.1 * b["engine_tpot_ms"]
        )
        if within and b["errors"] == 0:
            best = out["relayed_within_10pct"]
            if best is None or b["tok_s"] > best["tok_s"]:
                out["relayed_within_10pct"] = {"level": level, "tok_s": b["tok_s"]}
        out["levels"][level] = {"short": a, "long": b, "per_token_us": per_token, "split": split(a, b)}
    return out


SERVICES = ("gateway", "context", "safety_in", "router", "tools", "inference", "safety_out", "logger", "nats-server")


def render(engine: str, args: argparse.Namespace, s: dict[str, Any], ready_s: float) -> str:
    lv = s["levels"]
    short, long = min(args.lengths), max(args.lengths)
    lines = [
        MARK_BEGIN.format(engine=engine),
        f"### Stage CPU, engine `{engine.removesuffix('-scaled')}`"
        + (", two gateways and two safety_outs (queue groups)" if engine.endswith("-scaled") else ""),
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; machine: {machine()}",
        f"- command: `python -m bench.stage_bench {' '.join(sys.argv[1:])}`",
        f"- the stack as `make run` starts it (ready in {ready_s:.0f} s), limits raised; streamed "
        f"`/v1/chat/completions`, greedy, EOS ignored, answers of {short} and {long} tokens; CPU of every process "
        "from /proc around each run; the load generator (bench/sse_client.py, raw HTTP/1.1) is this process",
        "",
        f"Per level, at {long}-token answers (client ITL: first content delta to last over the tokens after the "
        "first, p50 over requests; delta gap: median gap between deltas; engine figures from a sample of request "
        "records):",
        "",
        "| streams | requests | errors | tok/s received | client TTFT p50 ms | engine TTFT p50 ms | client ITL p50 ms "
        "| engine TPOT p50 ms | delta gap p50 ms | deltas/token p50 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for level, v in lv.items():
        b = v["long"]
        lines.append(
            f"| {level} | {b['requests']} | {b['errors']} | {b['tok_s']:.0f} | {f1(b['client_ttft_ms'])} | "
            f"{f1(b['engine_ttft_ms'])} | {f1(b['itl_ms'])} | {f1(b['engine_tpot_ms'])} | {f1(b['gap_ms'])} | "
            f"{f1(b['deltas_per_token'], 2)} |"
        )
    best = s["relayed_within_10pct"]
    lines += [
        "",
        "Highest rate relayed with the client's ITL p50 within 10 % of the engine's TPOT: "
        + (f"**{best['tok_s']:.0f} tok/s** ({best['level']} streams)." if best else "none of the levels."),
        "",
        f"CPU µs per received token, every process, at {long}-token answers (`x/classifier`: the MiniLM passes "
        "on x's classifier thread, part of x's figure):",
        "",
        "| process | " + " | ".join(f"{level} streams" for level in lv) + " |",
        "|---|" + "---|" * len(lv),
    ]
    seen = set().union(*(v["per_token_us"] for v in lv.values()))
    extra = sorted(n for n in seen if n not in SERVICES and n != "load generator")
    names = [*SERVICES, *extra, "load generator"]
    for name in names:
        cells = [f"{v['per_token_us'].get(name, 0):.0f}" for v in lv.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    outside = [n for n in names if n not in ("inference", "load generator") and "/" not in n]
    models = [n for n in names if n.endswith("/classifier")]
    lines.append(
        "| **all but inference and the load generator** | "
        + " | ".join(f"**{sum(v['per_token_us'].get(n, 0) for n in outside):.0f}**" for v in lv.values())
        + " |"
    )
    lines.append(
        "| **the same, less the classifier passes** | "
        + " | ".join(
            f"**{sum(v['per_token_us'].get(n, 0) for n in outside) - sum(v['per_token_us'].get(n, 0) for n in models):.0f}**"
            for v in lv.values()
        )
        + " |"
    )
    top = max(lv)
    sp = lv[top]["split"]
    lines += [
        "",
        f"Split at {top} streams ({short} vs {long} tokens, same requests): µs per request + µs per token, and "
        f"cores per 10,000 tok/s of {args.answer}-token answers (= (per request / {args.answer} + per token) x 10,000 / 1e6):",
        "",
        "| process | µs per request | µs per token | cores per 10,000 tok/s |",
        "|---|---|---|---|",
    ]
    for name in names:
        req, tok = sp.get(name, (0.0, 0.0))
        cores = (req / args.answer + tok) * 10_000 / 1e6
        lines.append(f"| {name} | {req:.0f} | {tok:.1f} | {cores:.2f} |")
    lines += ["", MARK_END.format(engine=engine), ""]
    return "\n".join(lines)


def f1(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="sim", help="the inference engine kind: sim (default) or native")
    ap.add_argument("--levels", default="1,32,256,1024")
    ap.add_argument("--lengths", default="32,128", help="the two answer lengths the split is measured with")
    ap.add_argument("--per-stream", type=int, default=2, help="requests per stream slot and length (at least 16)")
    ap.add_argument("--answer", type=int, default=256, help="answer length the sizing table assumes")
    ap.add_argument(
        "--scale",
        action="store_true",
        help="a second replica of the gateway and of safety_out (queue groups share the work; the clients "
        "alternate between the two gateways), reported as its own section",
    )
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    args.lengths = sorted(int(x) for x in args.lengths.split(","))
    if len(args.lengths) != 2:
        raise SystemExit("--lengths takes two answer lengths")
    from switchyard.cli.stack import Stack
    from switchyard.libs.bus.embedded import free_port

    data = Path(tempfile.mkdtemp(prefix="stage-bench-"))
    stack = Stack(data_dir=data, port=free_port(), env=stack_env(args.engine))
    print(f"starting the stack (engine {args.engine}, logs in {data}/logs) ...", flush=True)
    runs = []
    try:
        t = time.perf_counter()
        stack.start(timeout_s=900)
        ready = time.perf_counter() - t
        urls = [stack.url]
        if args.scale:
            second = free_port()
            stack.start_service("safety_out", stack.service_env, replica="b")
            stack.start_service("gateway", {**stack.service_env, "SWITCHYARD_PORT": str(second)}, replica="b")
            urls.append(f"http://127.0.0.1:{second}")
            wait_listening(urls[1], stack.api_key)
        pids = {tag: p.pid for tag, p in stack.procs.items()}
        assert stack.nats is not None
        pids["nats-server"] = stack.nats.proc.pid
        models = httpx.get(f"{stack.url}/v1/models", headers={"Authorization": f"Bearer {stack.api_key}"}).json()
        model = f"{models['data'][0]['id']}:fast"
        asyncio.run(drive(urls, stack.api_key, model, ["Say hello. (warm-up)"] * 4, 2, 8))
        for level, tokens, texts in plan(args.levels, args.lengths, args.per_stream):
            r = asyncio.run(run_level(urls, stack.api_key, stack.admin_key, model, pids, level, tokens, texts))
            runs.append(r)
            if args.json:  # kept as it goes: a run cut short still leaves its finished levels
                Path(args.json).write_text(json.dumps({"runs": runs}, indent=1, default=str))
            print(
                f"  {level} streams x {tokens} tokens: {r['tok_s']:.0f} tok/s, errors {r['errors']}"
                + (f" ({r['error_sample'][:120]})" if r["errors"] else ""),
                flush=True,
            )
    finally:
        stack.stop()
    summary = summarize(runs, args.lengths)
    label = f"{args.engine}-scaled" if args.scale else args.engine
    section = render(label, args, summary, ready)
    if args.out:
        write_section(args.out, MARK_BEGIN.format(engine=label), MARK_END.format(engine=label), section)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1, default=str))
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
