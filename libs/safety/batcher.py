"""One classifier forward for every caller that is waiting: batching across concurrent requests.

A service that judges many streams (safety_out) or many requests (safety_in) would otherwise queue one
MiniLM pass per caller behind a thread pool; 32 streams meant 32 passes in a row. Here callers put
their texts in a queue, and a single worker takes everything that is waiting, scores it in one
pass off the event loop, and hands each caller its rows. Nothing waits for a batch to fill: a lone
caller is scored at once, and whatever arrives while a pass runs forms the next one.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from libs.safety.classifier import EmbeddingClassifier

Scores = dict[str, float]


@dataclass
class _Job:
    texts: list[str]
    done: asyncio.Future[list[Scores]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ScoreBatcher:
    """Scores texts with ``classifier.score_many``; at most ``max_texts`` per pass (the rest waits).

    Passes run on one thread of their own, ``nice`` steps below the caller's priority and with
    ``threads`` torch threads: on a small machine the engine's decode step and the token path come
    first, and a classifier pass takes what CPU is left (Linux nice values are per thread).
    """

    def __init__(self, classifier: EmbeddingClassifier, max_texts: int = 64, *, nice: int = 0, threads: int = 0):
        self.classifier = classifier
        self.max_texts = max_texts
        self._pool = background_pool("classifier", nice=nice, threads=threads)
        self.passes = 0  # forward passes run, for tests and the record
        self.scored = 0  # texts scored
        self._queue: asyncio.Queue[_Job] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def score_many(self, texts: list[str]) -> list[Scores]:
        if not texts:
            return []
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue))
        job = _Job(list(texts))
        self._queue.put_nowait(job)
        return await job.done

    async def _run(self, queue: asyncio.Queue[_Job]) -> None:
        # Invariant: every job taken from the queue has its future resolved, with rows or an error.
        while True:
            jobs = [await queue.get()]
            size = len(jobs[0].texts)
            while not queue.empty() and size < self.max_texts:
                job = queue.get_nowait()
                jobs.append(job)
                size += len(job.texts)
            flat = [t for j in jobs for t in j.texts]
            try:
                rows = await asyncio.get_running_loop().run_in_executor(self._pool, self.classifier.score_many, flat)
            except Exception as e:  # a failed pass fails its callers, not the worker
                for j in jobs:
                    if not j.done.done():
                        j.done.set_exception(e)
                continue
            self.passes += 1
            self.scored += len(flat)
            at = 0
            for j in jobs:
                if not j.done.done():  # the caller may have been cancelled meanwhile
                    j.done.set_result(rows[at : at + len(j.texts)])
                at += len(j.texts)

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
    return ThreadPoolExecutor(1, name, initializer=_prepare_worker, initargs=(nice, threads))


def _prepare_worker(nice: int, threads: int) -> None:
    if nice:
        os.nice(nice)
    if threads:
        import torch

        torch.set_num_threads(threads)
