"""Step-thread policies at one stream, with and without busy processes beside the engine.

    python -m bench.step_threads_bench [--rounds 2] [--busy 0,1,2] [--tokens 128]

For each count of busy-loop processes (`python -c 'while 1: pass'`, not pinned, nice 0) and each round,
every policy runs in turn in a fresh worker process (the engine alone, its own OpenMP team): narrow
(`SWITCHYARD_ENGINE_WIDE_STEP_BATCH=0`), fixed wide (every core for a one-sequence step,
`SWITCHYARD_ENGINE_ADAPTIVE_THREADS=false`) and adaptive (the default, switchyard/libs/engine/threads.py).
A worker warms up with one short request, then decodes `--requests` greedy requests one after another
and reports the time between tokens (TPOT), tok/s, its CPU seconds per token and its wide steps.
Figures go to stdout as a markdown table; they belong in docs/benchmarks.md with the load they ran under.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time

POLICIES = {
    "narrow": {"SWITCHYARD_ENGINE_WIDE_STEP_BATCH": "0"},
    "fixed wide": {"SWITCHYARD_ENGINE_WIDE_STEP_BATCH": "1", "SWITCHYARD_ENGINE_ADAPTIVE_THREADS": "false"},
    "adaptive": {},
}
PROMPT = "Write a short story about a lighthouse keeper."


async def _worker(tokens: int, requests: int) -> dict[str, float]:
    from switchyard.libs.engine import EngineConfig, EngineSettings, SamplingParams, create_engine

    engine = create_engine(EngineSettings().apply(EngineConfig()))
    await engine.start()
    try:

        async def one(rid: str, n: int) -> list[float]:
            params = SamplingParams(max_tokens=n, ignore_eos=True)
            return [c.token_at async for c in engine.generate(rid, PROMPT, params) if c.token_at is not None]

        await one("warm", 16)
        cpu0, wall0, m0 = time.process_time(), time.perf_counter(), engine.metrics()
        gaps: list[float] = []
        for i in range(requests):
            at = await one(f"r{i}", tokens)
            gaps += [b - a for a, b in itertools.pairwise(at)]
        wall, cpu, m = time.perf_counter() - wall0, time.process_time() - cpu0, engine.metrics()
    finally:
        await engine.stop()
    made = m.generated_tokens - m0.generated_tokens
    q = statistics.quantiles(gaps, n=20)
    return {
        "tpot_p50_ms": statistics.median(gaps) * 1e3,
        "tpot_p95_ms": q[18] * 1e3,
        "tok_s": made / wall,
        "cpu_ms_per_token": cpu / made * 1e3,
        "wide_share": (m.wide_steps - m0.wide_steps) / max(1, m.steps - m0.steps),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", default="0,1,2", help="busy-loop processes beside the engine, comma-separated")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(_worker(args.tokens, args.requests))))
        return
    policies = args.policies.split(",")
    print(
        "| busy loops | round | load at start | policy | TPOT p50 ms | TPOT p95 ms | tok/s | CPU ms/token | wide steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for busy in (int(b) for b in args.busy.split(",")):
        hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(busy)]
        try:
            for rnd in range(args.rounds):
                order = policies[rnd % len(policies) :] + policies[: rnd % len(policies)]
                for name in order:
                    load = os.getloadavg()[0]
                    cmd = [sys.executable, "-m", "bench.step_threads_bench", "--worker"]
                    cmd += ["--tokens", str(args.tokens), "--requests", str(args.requests)]
                    out = subprocess.run(
                        cmd, env={**os.environ, **POLICIES[name]}, capture_output=True, text=True, check=True
                    ).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    print(
                        f"| {busy} | {rnd + 1} | {load:.1f} | {name} | {r['tpot_p50_ms']:.2f} | {r['tpot_p95_ms']:.2f} "
                        f"| {r['tok_s']:.1f} | {r['cpu_ms_per_token']:.2f} | {r['wide_share']:.0%} |",
                        flush=True,
                    )
        finally:
            for h in hogs:
                h.kill()
                h.wait()


if __name__ == "__main__":
    main()
