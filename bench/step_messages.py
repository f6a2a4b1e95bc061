"""The bus's share of hop 1 (inference → safety_out) alone: a message per frame against one per step.

    python -m bench.step_messages [--streams 256] [--steps 200] [--rounds 3]

`streams` streams make one frame each per engine step, through the project's bus on a nats-server of
its own. `per frame`: a message per frame on a subject per stream, one subscription per stream (hop 1
before issue 36). `per step`: one message per step carrying every stream's frame (`StepFrame`), one
subscription, each frame handed to its stream's task (hop 1 now). Reported: CPU µs per frame of this
process (publisher and reader both) and of the nats-server, the two alternated round by round. No
guard, no engine: only what the messages cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable

import msgspec

from switchyard.libs.bus import Bus, start_nats_server
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import RawChunk, subjects
from switchyard.schemas.frames import StepFrame, decode_step, encode_step_frame, join_step

_encode = msgspec.json.Encoder().encode
_frame = msgspec.json.Decoder(tuple[int, str, str, int])


def cpu_s(pid: int | None = None) -> float:
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def per_frame(pub: Bus, sub: Bus, streams: int, steps: int) -> None:
    got, done = 0, asyncio.Event()

    async def on_frame(_: tuple[int, str, str, int]) -> None:
        nonlocal got
        got += 1
        if got == streams * steps:
            done.set()

    subs = [await sub.watch_frames(f"stream.raw.r{i}", _frame.decode, on_frame) for i in range(streams)]
    await sub.flush()
    for step in range(steps):
        for i in range(streams):
            await pub.publish_frame(f"stream.raw.r{i}", _encode((step, "delta", " word", 1)))
        await asyncio.sleep(0)
    await asyncio.wait_for(done.wait(), 300)
    for s in subs:
        await s.unsubscribe()


async def per_step(pub: Bus, sub: Bus, streams: int, steps: int) -> None:
    inboxes: dict[str, list[StepFrame]] = {f"r{i}": [] for i in range(streams)}
    arrived = {rid: asyncio.Event() for rid in inboxes}
    left = streams

    async def read(rid: str) -> None:
        nonlocal left
        seen = 0
        while seen < steps:
            await arrived[rid].wait()
            arrived[rid].clear()
            items, inboxes[rid] = inboxes[rid], []
            seen += len(items)
        left -= 1

    async def on_step(step: list[StepFrame] | RawChunk) -> None:
        assert isinstance(step, list)
        for f in step:
            inboxes[f.rid].append(f)
            arrived[f.rid].set()

    readers = [asyncio.create_task(read(rid)) for rid in inboxes]
    sub_ = await sub.watch_frames(subjects.stream_steps_to("s1"), decode_step, on_step)
    await sub.flush()
    subject = subjects.stream_steps("s1", "i1")
    for step in range(steps):
        frames = [encode_step_frame(f"r{i}", step, "delta", " word", 1) for i in range(streams)]
        await pub.publish_frame(subject, join_step(frames))
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*readers), 300)
    await sub_.unsubscribe()


async def main(streams: int, steps: int, rounds: int) -> None:
    server = start_nats_server(store_dir=tempfile.mkdtemp(prefix="step-messages-"))
    runs: dict[str, Callable[[Bus, Bus, int, int], Awaitable[None]]] = {"per frame": per_frame, "per step": per_step}
    try:
        pub = await Bus.connect(server.url, "inference", "i1", setup_tracing("inference"))
        sub = await Bus.connect(server.url, "safety_out", "s1", setup_tracing("safety_out"))
        print(f"{streams} streams x {steps} steps, one frame per stream per step")
        print("| round | hop 1 | python µs/frame | nats-server µs/frame | wall s |\n|---|---|---|---|---|")
        for r in range(rounds):
            for name, run in runs.items():
                c0, s0, w0 = cpu_s(), cpu_s(server.proc.pid), time.perf_counter()
                await run(pub, sub, streams, steps)
                c1, s1, w1 = cpu_s(), cpu_s(server.proc.pid), time.perf_counter()
                n = streams * steps
                print(f"| {r + 1} | {name} | {1e6 * (c1 - c0) / n:.1f} | {1e6 * (s1 - s0) / n:.1f} | {w1 - w0:.2f} |")
        await pub.close()
        await sub.close()
    finally:
        server.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    asyncio.run(main(a.streams, a.steps, a.rounds))
