"""The gateway alone: its CPU per relayed token and per request, with the pipeline behind it faked.

    python -m bench.gateway_bench [--streams 256] [--lengths 32,128] [--step-ms 40] [--per-stream 2]

Starts a nats-server and the gateway process (switchyard.cli.stack.Stack, `services=("gateway",)`); this
process plays every other stage: it answers their health subjects, takes each request's `Work` on
`pipeline.context` (acked at once), and streams its answer on `chat.events.<rid>` as safety_out does, one
`TextFrame` per token, every open stream one token per step of `--step-ms`, then `done`. Clients are the
lean raw-HTTP ones of bench/sse_client.py, `--streams` open at every moment. Around each run it reads the
gateway's CPU time from /proc; two answer lengths with the same requests split it into a cost per request
and a cost per token (as bench/stage_bench.py does). What stage_bench's gateway row measures, without the
other stages' CPU competing for the same two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx

from bench.sse_client import drive
from bench.stage_bench import cpu_s, stack_env

WORDS = [" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", "."]


class FakePipeline:
    """Every stage behind the gateway, in one loop on its own thread."""

    def __init__(self, url: str, step_s: float) -> None:
        self.url, self.step_s = url, step_s
        self.streams: dict[str, list[int]] = {}  # rid -> [tokens left, tokens sent]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self.main(),), daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(30):
            raise TimeoutError("the fake pipeline did not connect")

    def stop(self) -> None:
        """Closed before the nats-server stops, so it does not try to reconnect."""
        asyncio.run_coroutine_threadsafe(self.bus.close(), self.loop).result(10)

    async def main(self) -> None:
        from switchyard.libs.bus import Bus
        from switchyard.libs.telemetry import setup_tracing
        from switchyard.schemas import HealthReply, HealthRequest, Work, WorkAccepted, subjects

        bus = await Bus.connect(self.url, "context", "fake", setup_tracing("context"))
        self.bus = bus
        for stage in subjects.STAGES:
            if stage == "gateway":
                continue

            async def health(_: HealthRequest, stage: str = stage) -> HealthReply:
                return HealthReply(stage=stage, replica="fake")

            await bus.subscribe(subjects.health(stage), HealthRequest, health, span=False)

        async def take(work: Work) -> WorkAccepted:
            self.streams[work.rid] = [work.sampling.max_tokens or 16, 0]
            return WorkAccepted(rid=work.rid, replica="fake")

        await bus.subscribe(subjects.CONTEXT, Work, take, queue="context", span=False)
        await bus.flush()
        self.ready.set()
        await self.steps()

    async def steps(self) -> None:
        from switchyard.schemas import ChatEvent, Usage, subjects
        from switchyard.schemas.frames import encode_text

        while True:
            started = time.perf_counter()
            for rid, state in list(self.streams.items()):
                left, sent = state
                subject = subjects.chat_events(rid)
                if left > 0:
                    await self.bus.publish_frame(subject, encode_text("delta", WORDS[sent % len(WORDS)]))
                    state[0], state[1] = left - 1, sent + 1
                    continue
                del self.streams[rid]
                usage = Usage(prompt_tokens=8, completion_tokens=sent)
                await self.bus.publish(subject, ChatEvent(rid=rid, type="done", finish_reason="length", usage=usage))
            await asyncio.sleep(max(0.0, self.step_s - (time.perf_counter() - started)))


def run_level(urls: list[str], key: str, model: str, pid: int, streams: int, tokens: int, n: int) -> dict[str, Any]:
    texts = [f"Say something. (request {i})" for i in range(n)]
    before, t0 = cpu_s(pid), time.perf_counter()
    got = asyncio.run(drive(urls, key, model, texts, streams, tokens))
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - before
    received = sum(g.completion_tokens or 0 for g in got if g.error is None)
    return {
        "tokens": tokens,
        "requests": len(got),
        "errors": sum(g.error is not None for g in got),
        "error_sample": next((g.error for g in got if g.error), None),
        "received": received,
        "wall_s": wall,
        "tok_s": received / wall,
        "gateway_cpu_s": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--lengths", default="32,128")
    ap.add_argument("--step-ms", type=float, default=40.0)
    ap.add_argument("--per-stream", type=int, default=2, help="requests per stream slot and length")
    ap.add_argument("--rounds", type=int, default=1, help="the two lengths, this many times over")
    args = ap.parse_args(argv)
    short, long = sorted(int(x) for x in args.lengths.split(","))
    from switchyard.cli.stack import Stack
    from switchyard.libs.bus import start_nats_server
    from switchyard.libs.bus.embedded import free_port

    data = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    nats = start_nats_server(store_dir=str(data / "nats"))
    fake = FakePipeline(nats.url, args.step_ms / 1000)
    fake.start()
    stack = Stack(data_dir=data, port=free_port(), env=stack_env("sim"), nats_url=nats.url, services=("gateway",))
    try:
        stack.start(timeout_s=120)
        pid = stack.procs["gateway"].pid
        auth = {"Authorization": f"Bearer {stack.api_key}"}
        model = f"{httpx.get(f'{stack.url}/v1/models', headers=auth).json()['data'][0]['id']}:fast"
        run_level([stack.url], stack.api_key, model, pid, 4, 8, 8)  # warm-up
        n = max(16, args.per_stream * args.streams)
        for _ in range(args.rounds):
            a = run_level([stack.url], stack.api_key, model, pid, args.streams, short, n)
            b = run_level([stack.url], stack.api_key, model, pid, args.streams, long, n)
            per_token = (b["gateway_cpu_s"] - a["gateway_cpu_s"]) / (n * (long - short))
            per_request = a["gateway_cpu_s"] / n - short * per_token
            for r in (a, b):
                print(
                    f"  {args.streams} streams x {r['tokens']} tokens: {r['tok_s']:.0f} tok/s, gateway "
                    f"{r['gateway_cpu_s'] / r['received'] * 1e6:.1f} µs/token all in, errors {r['errors']}"
                    + (f" ({r['error_sample'][:120]})" if r["errors"] else ""),
                    flush=True,
                )
            print(f"  split: {per_request * 1e6:.0f} µs per request, {per_token * 1e6:.1f} µs per token", flush=True)
    finally:
        stack.stop()
        fake.stop()
        nats.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
