"""Peers benchmark: Switchyard's stack against llama.cpp's `llama-server` and vLLM's OpenAI server, same box.

    make bench-peers                   # = python -m bench.peers_bench: every default below
    python -m bench.peers_bench --plan # the points and the expected duration, nothing run
    python -m bench.peers_bench --levels 1 --requests 1 --tokens 8   # a smoke run of the whole pipeline

llama-server is built from source once (bench/peers_build.py, cached under ~/.cache/switchyard), vLLM
runs from `make setup-vllm`'s virtualenv on the HF checkpoint written from our GGUF, and the stack
starts as `make run` does (bench/peers_servers.py). One client drives them all (bench/sse_client.py:
streamed `/v1/chat/completions`, greedy, `ignore_eos`, which all three take) with the same prompts, a
fresh nonce at the start of each (bench/peers_prompts.py), at each level of concurrent streams and for
each workload: prefill-heavy (170-token messages, 64 out) and decode-heavy (35-token messages, 128 out).
The servers stay up together and take turns point by point, the first of each turn rotating, because
a shared box drifts by tens of percent within minutes: a comparison is only good within one point.
llama-server and vLLM (each a process group of its own) are held with SIGSTOP while another has its
turn: vLLM's CPU worker polls about a core while idle. The stack idles quietly and is left running.
The table goes to --out under "## Peers" (its own markers; appended at the end the first time) and
every figure to --json (bench/results/, git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import secrets
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import peers_servers as ps
from bench.peers_prompts import WORKLOADS, Workload, build_prompt, rendered_tokens, tokenizer_count
from bench.peers_report import MARK_BEGIN, MARK_END, cpu_class, render, summarize
from bench.report import cpu_info, machine, write_section
from bench.sse_client import drive

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ("switchyard", "llama-server", "vllm")
# llama-server's context per slot and vLLM's max model length: the longest workload with room to spare.
SLOT_CTX = 512
# For the printed estimate: aggregate tok/s the slowest server keeps at each level on a quiet 2-core box,
# on the low side, and what starting the three servers costs (vLLM's compile dominates).
ASSUMED_TOK_S = {1: 30.0, 8: 100.0, 32: 150.0}
STARTUP_S = 300.0
BUILD_S = 1500.0  # building llama-server the first time, -j 2 on a quiet 2-core box


def requests_for(level: int, requested: int | None) -> int:
    """At least two requests per stream (one is all start-up), at least one per stream, or as asked."""
    return requested if requested else max(8, 2 * level)


def points(args: argparse.Namespace) -> list[tuple[Workload, int, int]]:
    """(workload, level, requests) in the order they run."""
    out = []
    for name in args.workloads:
        w = WORKLOADS[name]
        w = Workload(w.name, w.prompt_tokens, args.tokens or w.out_tokens)
        out += [(w, level, requests_for(level, args.requests)) for level in args.levels]
    return out


def expected_s(plan: list[tuple[Workload, int, int]], servers: int, build: bool = False) -> float:
    """A rough bound for planning: every server's tokens at the assumed rates, plus start-up (and the build)."""
    rate = lambda level: ASSUMED_TOK_S.get(level, max(ASSUMED_TOK_S.values()))  # noqa: E731
    run = servers * sum(n * w.out_tokens / rate(level) for w, level, n in plan)
    return STARTUP_S + run + (BUILD_S if build else 0.0)


def start(name: str, args: argparse.Namespace, logs: Path) -> ps.Server:
    from bench.engine_bench import model_path

    gguf, slots = model_path(), max(args.levels)
    if name == "llama-server":
        from bench.peers_build import ensure_llama_server

        binary = ensure_llama_server(src=args.llama_src)
        return ps.start_llama(binary, gguf, args.llama_threads, slots, SLOT_CTX, logs)
    if name == "vllm":
        from bench.vllm_bench import vllm_python

        python = vllm_python()
        if python is None:
            raise RuntimeError("no vLLM environment: make setup-vllm (or set VLLM_VENV)")
        return ps.start_vllm(python, gguf, slots, SLOT_CTX, args.vllm_eager, logs)
    if name == "switchyard":
        return ps.start_switchyard(logs)
    raise ValueError(f"unknown server {name!r}; one of {', '.join(SERVERS)}")


async def run_point(server: ps.Server, texts: list[str], level: int, tokens: int, timeout_s: float) -> dict[str, Any]:
    t = time.perf_counter()
    try:
        samples = await asyncio.wait_for(
            drive([server.url], server.api_key, server.model, texts, level, tokens), timeout_s
        )
    except TimeoutError:
        late = summarize([], time.perf_counter() - t)
        return {
            **late,
            "requests": len(texts),
            "errors": len(texts),
            "first_errors": [f"timed out after {timeout_s:.0f}s"],
        }
    return summarize(samples, time.perf_counter() - t)


async def warm_up(server: ps.Server, nonce: str) -> None:
    """Two short requests: each server's first ones pay one-time costs (connections, lazy loads, graphs)."""
    texts = [f"[{nonce}-warm-{server.name}-{i}] Say hello." for i in range(2)]
    samples = await asyncio.wait_for(drive([server.url], server.api_key, server.model, texts, 1, 8), 300)
    bad = [s.error or "no content in the stream" for s in samples if s.error or not s.delta_ns]
    if bad:
        raise RuntimeError(f"{server.name} fails a short streamed request: {bad[0]}")


async def bench(servers: list[ps.Server], args: argparse.Namespace, nonce: str) -> dict[str, Any]:
    count = tokenizer_count()
    out: dict[str, Any] = {}
    index = 0
    for k, (w, level, n) in enumerate(points(args)):
        texts = [build_prompt(nonce, index + i, w.prompt_tokens, count) for i in range(n)]
        index += n
        order = servers[k % len(servers) :] + servers[: k % len(servers)]
        results: dict[str, Any] = {}
        for s in order:
            for other in servers:
                other.pause(other is not s)
            # What a server does after its last stream (the stack's logger writing records) is not the next one's cost.
            await asyncio.sleep(args.settle)
            results[s.name] = await run_point(s, texts, level, w.out_tokens, args.point_timeout)
            results[s.name]["turn"] = order.index(s)
            print(
                f"  {w.name} {level} streams {s.name}: {results[s.name].get('tok_s') or 0:.1f} tok/s "
                f"({results[s.name]['errors']}/{n} errors, {results[s.name].get('stopped_by_safety', 0)} stopped by "
                "output safety)",
                flush=True,
            )
        out.setdefault(w.name, {})[str(level)] = {s.name: results[s.name] for s in servers}
    for s in servers:
        s.pause(False)
    return out


def record(args: argparse.Namespace, nonce: str) -> dict[str, Any]:
    """What the table's header says about the run, before any server starts."""
    from bench.engine_bench import model_path

    count = tokenizer_count()
    sample = build_prompt(nonce, 0, WORKLOADS["decode"].prompt_tokens, count)
    template = rendered_tokens(sample) - count(sample)
    shapes = {w.name: w for w, _, _ in points(args)}
    per_level = ", ".join(f"{requests_for(level, args.requests)} at {level}" for level in args.levels)
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m bench.peers_bench " + shlex.join(sys.argv[1:]),
        "machine": machine(),
        "cpu_class": cpu_class(cpu_info()[1]),
        "load": f"{os.getloadavg()[0]:.2f}",
        "nonce": nonce,
        "model": os.path.basename(model_path()),
        "workloads": {n: {"message_tokens": w.prompt_tokens, "out_tokens": w.out_tokens} for n, w in shapes.items()},
        "template_tokens": template,
        "smoke": bool(args.tokens or args.requests),
        "requests_note": f"{per_level} stream(s); "
        + "; ".join(
            f"{n}: {w.prompt_tokens}-token messages ({w.prompt_tokens + template} with the chat template) -> "
            f"{w.out_tokens} tokens"
            for n, w in shapes.items()
        ),
        "servers": {},
        "points": {},
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default=",".join(SERVERS), help="which to run, comma-separated")
    ap.add_argument("--levels", default="1,8,32", help="concurrent streams, comma-separated")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    ap.add_argument("--requests", type=int, default=None, help="requests per point (default max(8, 2 x level))")
    ap.add_argument("--tokens", type=int, default=None, help="output tokens for every workload (smoke runs)")
    ap.add_argument("--out", default="docs/benchmarks.md", help="markdown file for the section; '' for none")
    ap.add_argument("--json", default=None, help="raw results (default bench/results/peers-<UTC time>.json)")
    ap.add_argument("--llama-src", default=None, help="an unpacked llama-cpp-python sdist (default: pip download)")
    ap.add_argument("--llama-threads", type=int, default=os.cpu_count() or 1, help="llama-server -t")
    ap.add_argument("--vllm-eager", action="store_true", help="vLLM without its start-up compile (smoke runs)")
    ap.add_argument("--point-timeout", type=float, default=900.0, help="seconds one server may take on one point")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds of quiet before each server's turn")
    ap.add_argument("--plan", action="store_true", help="print the points and the expected duration, run nothing")
    args = ap.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    args.levels = [int(x) for x in args.levels.split(",")]
    args.workloads = [w for w in args.workloads.split(",") if w]
    bad = [s for s in args.servers if s not in SERVERS] + [w for w in args.workloads if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown: {', '.join(bad)}")
    return args


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = points(args)
    from bench.peers_build import binary_path

    build = "llama-server" in args.servers and not binary_path().is_file()
    est = expected_s(plan, len(args.servers), build)
    print(
        f"{len(plan)} points x {len(args.servers)} servers; expected duration about {est / 60:.0f} min"
        + (f", {BUILD_S / 60:.0f} of them building llama-server (once)" if build else ""),
        flush=True,
    )
    if args.plan:
        for w, level, n in plan:
            print(f"  {w.name}: {level} streams, {n} requests of {w.prompt_tokens} tokens -> {w.out_tokens}")
        return 0
    # SIGTERM ends the run as Ctrl-C does: through the finally below, which stops every server.
    signal.signal(signal.SIGTERM, _interrupt)
    nonce = secrets.token_hex(4)
    r = record(args, nonce)
    logs = Path(tempfile.mkdtemp(prefix="peers-bench-"))
    print(f"server logs in {logs}", flush=True)
    servers: list[ps.Server] = []
    t0 = time.monotonic()
    try:
        for name in args.servers:
            print(f"starting {name} ...", flush=True)
            try:
                s = start(name, args, logs)
                servers.append(s)
                asyncio.run(warm_up(s, nonce))
            except (RuntimeError, OSError, TimeoutError) as e:
                print(f"  {name} did not start: {e}", flush=True)
                r["servers"][name] = {"error": str(e)}
                continue
            r["servers"][name] = {"command": s.command, "ready_s": s.ready_s, "notes": s.notes, "log": str(s.log)}
            print(f"  ready in {s.ready_s:.0f}s: {s.url} ({s.model})", flush=True)
        live = [s for s in servers if "error" not in r["servers"][s.name]]
        if not live:
            raise SystemExit("no server started; see above")
        r["points"] = asyncio.run(bench(live, args, nonce))
    finally:
        for s in servers:
            s.close()
    r["duration_s"] = time.monotonic() - t0
    path = Path(args.json or ROOT / "bench" / "results" / f"peers-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r, indent=1))
    section = render(r)
    if args.out:
        write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)
    print(f"raw results: {path}; took {r['duration_s'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
