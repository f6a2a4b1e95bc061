"""A paid-tier request's time to first token while a queue of free-tier requests waits: the native engine
under first come, first served against the priority policy, in one run.

    python bench/priority_bench.py [--out docs/benchmarks.md] [--free 8] [--seats 2] [--free-tokens 32]
        [--paid-tokens 8] [--rounds 3]

Per policy, one engine (the bundled model, `--seats` sequences at most) and `--rounds` rounds: `--free`
requests at the free tier's priority (10) are submitted together; once the engine runs `--seats` of them
and queues the rest, one request at the paid tier's priority (0) is submitted. Its TTFT is the engine's own
(arrival to first token). Every round salts its prompts with its own cache_salt, so no round is served
from an earlier round's prefix cache. Prints a markdown section, or with --out writes it into that file
(replacing this benchmark's earlier section); `make bench` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.engine_bench import chat_prompt
from bench.report import machine, write_section
from switchyard.libs.engine import EngineConfig, SamplingParams, create_engine

MARK_BEGIN = "<!-- priority_bench:begin -->"
MARK_END = "<!-- priority_bench:end -->"
FREE_PRIORITY, PAID_PRIORITY = 10, 0  # the default tiers' (switchyard/services/gateway/settings.py)


async def _one(eng: Any, rid: str, prompt: str, max_tokens: int, priority: int, salt: str) -> float:
    """Runs one request to its end; its TTFT in ms."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, priority=priority, cache_salt=salt)
    ttft = None
    async for chunk in eng.generate(rid, prompt, params):
        if chunk.finished and chunk.usage is not None:
            ttft = chunk.usage.ttft_s
    assert ttft is not None, f"{rid} ended without a first token"
    return ttft * 1000


async def _round(eng: Any, args: argparse.Namespace, tag: str) -> tuple[float, list[float]]:
    tok = eng.tokenizer
    free = [
        asyncio.create_task(_one(eng, f"{tag}-free{i}", chat_prompt(tok, i), args.free_tokens, FREE_PRIORITY, tag))
        for i in range(args.free)
    ]
    queued = args.free - args.seats
    t0 = time.monotonic()
    while eng.metrics().waiting < queued or eng.metrics().running < args.seats:
        assert time.monotonic() - t0 < 120, "the free requests never queued"
        await asyncio.sleep(0.005)
    paid = await _one(eng, f"{tag}-paid", chat_prompt(tok, args.free), args.paid_tokens, PAID_PRIORITY, tag)
    return paid, list(await asyncio.gather(*free))


async def _policy(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    eng = create_engine(EngineConfig(max_num_seqs=args.seats, scheduling_policy=policy, dtype=args.dtype))
    await eng.start()
    await _one(eng, "warm", chat_prompt(eng.tokenizer, 0), 4, 0, "warm")
    paid, free = [], []
    t = time.perf_counter()
    for r in range(args.rounds):
        p, f = await _round(eng, args, f"{policy}-{r}")
        paid.append(p)
        free.extend(f)
    row = {
        "policy": policy,
        "paid": statistics.median(paid),
        "paid_all": paid,
        "free_mean": statistics.mean(free),
        "free_max": max(free),
        "wall": (time.perf_counter() - t) / args.rounds,
        "preemptions": eng.metrics().preemptions,
        "dtype": getattr(eng, "dtype", args.dtype),
    }
    await eng.stop()
    return row


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--free", type=int, default=8, help="free-tier requests submitted together")
    ap.add_argument("--seats", type=int, default=2, help="the engine's max_num_seqs")
    ap.add_argument("--free-tokens", type=int, default=32)
    ap.add_argument("--paid-tokens", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default=None, help="write the section into this markdown file")
    args = ap.parse_args()
    if args.free <= args.seats:
        ap.error("--free must exceed --seats, or nothing waits")
    load = os.getloadavg()[0]
    rows = [await _policy(p, args) for p in ("fcfs", "priority")]
    flags = (
        f"--free {args.free} --seats {args.seats} --free-tokens {args.free_tokens} "
        f"--paid-tokens {args.paid_tokens} --rounds {args.rounds}"
    )
    lines = [
        MARK_BEGIN,
        "### Tier priority in the engine (a paid request behind a free queue)",
        "",
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}; load average at start {load:.2f}",
        f"- command: `python bench/priority_bench.py {flags}{' --out ' + args.out if args.out else ''}`",
        f"- the native engine, bundled SmolLM2-135M, dtype `{rows[0]['dtype']}`, {args.seats} seats "
        f"(max_num_seqs); {args.free} free-tier requests (priority {FREE_PRIORITY}, {args.free_tokens} tokens each) "
        f"submitted together, then, with {args.free - args.seats} of them queued, one paid-tier request "
        f"(priority {PAID_PRIORITY}, {args.paid_tokens} tokens); EOS ignored, greedy; {args.rounds} rounds",
        "",
        "| policy | paid TTFT ms (median) | paid TTFT ms (each round) | free TTFT ms (mean / max) | "
        "round s | preemptions |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        each = ", ".join(f"{x:.0f}" for x in r["paid_all"])
        lines.append(
            f"| {r['policy']} | {r['paid']:.0f} | {each} | {r['free_mean']:.0f} / {r['free_max']:.0f} | "
            f"{r['wall']:.2f} | {r['preemptions']} |"
        )
    fcfs, prio = rows
    lines += [
        "",
        f"Under first come, first served the paid request waits for the whole queue ahead of it; under the "
        f"priority policy it takes the seat of the running free request of the highest rank at the next step "
        f"(that request is preempted and recomputed later: the preemptions column), so its TTFT was "
        f"{fcfs['paid'] / prio['paid']:.1f}x shorter in this run. The free requests pay for it in their mean TTFT.",
        MARK_END,
        "",
    ]
    section = "\n".join(lines)
    if args.out:
        write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)


if __name__ == "__main__":
    asyncio.run(main())
