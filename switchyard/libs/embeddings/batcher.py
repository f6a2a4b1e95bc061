"""One model pass for every caller that is waiting: batching across concurrent requests.

A service that judges many streams (safety_out), many requests (safety_in) or plans tools for many
requests would otherwise queue one MiniLM pass per caller behind a thread; 32 streams meant 32
passes in a row. Here callers put their texts in a queue, and a single worker takes everything that
is waiting, runs ``fn`` on it in one pass off the event loop, and hands each caller its rows.
Nothing waits for a batch to fill: a lone caller is served at once, and whatever arrives while a
pass runs forms the next one.

A pass holds at most ``max_texts`` texts, shared round-robin between the callers waiting: a caller with
thousands of texts is served over many passes, and one that arrives meanwhile has its share of the next
pass, so no caller waits on another's work for more than one pass (one 966 KB request once held
input safety 35 s and everyone else's timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
PR_SET_NAME = 15  # prctl(2)


@dataclass
class _Job(Generic[T, R]):
    texts: list[T]
    done: asyncio.Future[list[R]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    rows: list[R] = field(default_factory=list)  # of the texts served so far, in order

    @property
    def left(self) -> int:
        return len(self.texts) - len(self.rows)


def shares(jobs: Sequence[_Job[T, R]], budget: int) -> list[int]:
    """How many of its texts each job puts in the next pass: one each in turn, until `budget` is spent."""
    take = [0] * len(jobs)
    while budget > 0:
        before = budget
        for i, j in enumerate(jobs):
            if budget and take[i] < j.left:
                take[i] += 1
                budget -= 1
        if budget == before:
            break
    return take


class PassBatcher(Generic[T, R]):
    """Runs ``fn`` (texts in, one row per text out) on at most ``max_texts`` texts per pass (a text is
    whatever ``fn`` reads: a string, or a string with what to do with it).

    Passes run on one thread of their own, ``nice`` steps below the caller's priority and with
    ``threads`` torch threads: on a small machine the engine's decode step and the token path come
    first, and a pass takes what CPU is left (Linux nice values are per thread).
    """

    def __init__(
        self,
        fn: Callable[[list[T]], Sequence[R]],
        *,
        name: str,
        max_texts: int = 64,
        nice: int = 0,
        threads: int = 0,
    ):
        self.fn = fn
        self.max_texts = max_texts
        self._pool = background_pool(name, nice=nice, threads=threads)
        self.passes = 0  # passes run, for tests and the record
        self.done_texts = 0  # texts served
        self._queue: asyncio.Queue[_Job[T, R]] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def run_many(self, texts: list[T]) -> list[R]:
        if not texts:
            return []
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue))
        job: _Job[T, R] = _Job(list(texts))
        self._queue.put_nowait(job)
        return await job.done

    async def _run(self, queue: asyncio.Queue[_Job[T, R]]) -> None:
        # Invariant: every job taken from the queue has its future resolved, with rows or an error
        # (or its caller stopped waiting: a cancelled job is dropped with the rest of its texts).
        waiting: deque[_Job[T, R]] = deque()
        while True:
            if not waiting:
                waiting.append(await queue.get())
            while not queue.empty():
                waiting.append(queue.get_nowait())
            jobs = [j for j in waiting if not j.done.done()]
            waiting = deque(jobs)
            if not jobs:
                continue
            take = shares(jobs, self.max_texts)
            flat = [t for j, n in zip(jobs, take, strict=True) for t in j.texts[len(j.rows) : len(j.rows) + n]]
            try:
                rows = list(await asyncio.get_running_loop().run_in_executor(self._pool, self.fn, flat))
            except Exception as e:  # a failed pass fails its callers, not the worker
                for j, n in zip(jobs, take, strict=True):
                    if n and not j.done.done():
                        j.done.set_exception(e)
                continue
            self.passes += 1
            self.done_texts += len(flat)
            at = 0
            for j, n in zip(jobs, take, strict=True):
                j.rows += rows[at : at + n]
                at += n
                if j.left == 0 and not j.done.done():  # the caller may have been cancelled meanwhile
                    j.done.set_result(j.rows)
            # Served callers leave; the rest go round again, those this pass had no room for first.
            skipped = [j for j, n in zip(jobs, take, strict=True) if n == 0]
            served = [j for j, n in zip(jobs, take, strict=True) if n and j.left and not j.done.done()]
            waiting = deque(skipped + served)

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, Exception):
                pass
            self._worker = None
        self._pool.shutdown(wait=False)


def background_pool(name: str, *, nice: int, threads: int) -> ThreadPoolExecutor:
    """One worker thread for model work beside the engine: ``nice`` steps down, ``threads`` torch threads.

    One thread, not the event loop's default pool: six concurrent MiniLM passes on two cores took the
    engine's core from it (at 32 streams its step time rose by half)."""
    return ThreadPoolExecutor(1, name, initializer=_prepare_worker, initargs=(name, nice, threads))


def _prepare_worker(name: str, nice: int, threads: int) -> None:
    # Named for the kernel too (top -H, /proc/<pid>/task/*/comm): the model's CPU is told apart from the
    # event loop's (bench/stage_bench.py reports it so).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    if nice:
        os.nice(nice)
    if threads:
        import torch

        torch.set_num_threads(threads)
