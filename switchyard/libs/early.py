"""Model passes started before the request reaches the stage that needs them.

Context publishes each request's `Work` on `subjects.EARLY` as it takes it; safety_in and tools start
their model pass on the user's text from it (the classifier's, the planner's embeddings), so the pass
runs while context and the router do their part instead of after. When the request itself arrives,
the stage takes the pass it started, if it was started on exactly the same input (`key`), else runs its
own: an early pass changes when a result is computed, never what it is. A pass nobody takes (the
request was refused, or went to another replica) is dropped after `ttl_s`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

R = TypeVar("R")


class EarlyPasses(Generic[R]):
    def __init__(self, ttl_s: float = 30.0, max_pending: int = 1024) -> None:
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self._pending: dict[str, tuple[Hashable, float, asyncio.Task[R]]] = {}
        self.started = 0
        self.taken = 0  # passes a request used (for tests and the record)

    def start(self, rid: str, key: Hashable, run: Callable[[], Awaitable[R]]) -> None:
        """Run `run()` now for request `rid` on the input `key`, unless one is already running for it."""
        self._expire()
        if rid in self._pending or len(self._pending) >= self.max_pending:
            return
        task: asyncio.Task[R] = asyncio.ensure_future(run())
        # Nobody may await a pass that is dropped: its error must not be reported as never retrieved.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._pending[rid] = (key, time.monotonic(), task)
        self.started += 1

    def take(self, rid: str, key: Hashable) -> asyncio.Task[R] | None:
        """The pass started for `rid` on the same input, or None (run your own)."""
        entry = self._pending.pop(rid, None)
        if entry is None or entry[0] != key:
            return None
        self.taken += 1
        return entry[2]

    def _expire(self) -> None:
        old = time.monotonic() - self.ttl_s
        for rid in [rid for rid, (_, t, _) in self._pending.items() if t < old]:
            _, _, task = self._pending.pop(rid)
            task.cancel()

    def __len__(self) -> int:
        return len(self._pending)
