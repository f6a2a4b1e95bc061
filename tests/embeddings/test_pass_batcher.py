"""Passes are bounded and shared round-robin: a caller with many texts cannot hold another's for more
than one pass, and every caller gets its own rows, in order."""

from __future__ import annotations

import asyncio
import threading

from switchyard.libs.embeddings.batcher import PassBatcher
from tests.wait import wait_for


class Recorder:
    """Upper-cases texts, keeping each pass's texts; the first pass waits for `release`."""

    def __init__(self) -> None:
        self.passes: list[list[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, texts: list[str]) -> list[str]:
        if not self.passes:
            self.started.set()
            self.release.wait(10)
        self.passes.append(list(texts))
        return [t.upper() for t in texts]


async def test_a_big_caller_is_split_and_a_small_one_waits_at_most_one_pass() -> None:
    fn = Recorder()
    batcher = PassBatcher(fn, name="test", max_texts=8)
    try:
        first = asyncio.create_task(batcher.run_many(["hold"]))
        assert await asyncio.to_thread(fn.started.wait, 10)
        big = asyncio.create_task(batcher.run_many([f"b{i}" for i in range(50)]))
        small = asyncio.create_task(batcher.run_many(["s0", "s1"]))
        # Both callers queued behind the held pass before it ends.
        await wait_for(lambda: batcher._queue is not None and batcher._queue.qsize() == 2, what="both callers queued")
        fn.release.set()
        assert await first == ["HOLD"]
        assert await small == ["S0", "S1"]
        assert await big == [f"B{i}" for i in range(50)]
        assert all(len(p) <= 8 for p in fn.passes)
        # The pass after the one that held the worker already serves the small caller whole.
        assert {"s0", "s1"} <= set(fn.passes[1])
        assert batcher.done_texts == 53
    finally:
        await batcher.close()


async def test_a_failed_pass_fails_its_caller_and_the_worker_goes_on() -> None:
    calls: list[list[str]] = []

    def fn(texts: list[str]) -> list[str]:
        calls.append(texts)
        if "boom" in texts:
            raise RuntimeError("boom")
        return texts

    batcher = PassBatcher(fn, name="test", max_texts=4)
    try:
        try:
            await batcher.run_many(["boom"])
            raise AssertionError("the failed pass should fail its caller")
        except RuntimeError:
            pass
        assert await batcher.run_many(["a", "b", "c", "d", "e"]) == ["a", "b", "c", "d", "e"]
    finally:
        await batcher.close()
