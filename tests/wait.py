"""Waiting on an event in a test: ask again until it has happened, or fail at a deadline.

A fixed sleep before an assertion passes on a slow machine for the wrong reason (the thing it waited for
has not happened yet, and "not yet" looks like "never") or fails on one for no reason; these wait exactly
as long as the event takes, and fail with what they waited for and the last answer seen.

`wait_for` is for async tests (the predicate may be a coroutine function); `wait_until` is its twin for
synchronous ones (the end-to-end tests drive the stack over blocking HTTP). A predicate that asserts
and passes `ignore=(AssertionError,)` treats a failed check as "not yet", and the timeout reports its
message: the last state seen, said as the test would say it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

# Long enough for a loaded 2-core machine to get there, short enough that a test that never gets
# there fails in seconds rather than at the suite's timeout.
DEFAULT_TIMEOUT_S = 10.0


class WaitTimeout(AssertionError):
    """The deadline passed first. An AssertionError, so a test fails with it; its own type, so a best-effort
    wait can let only the timeout pass (`contextlib.suppress(WaitTimeout)`), never a failed assertion."""


def _timed_out(what: str, timeout: float, last: Any) -> WaitTimeout:
    return WaitTimeout(f"timed out after {timeout:g} s waiting for {what}; last: {str(last)[:2000]}")


async def wait_for(
    predicate: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT_S,
    what: str = "the condition",
    interval: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """The predicate's first truthy answer, asked every `interval` s; AssertionError after `timeout` s.

    `predicate` may return an awaitable (an async function), which is awaited. An exception of a type in
    `ignore` counts as "not yet" (a server still starting refuses connections); any other propagates, so an
    assertion inside the predicate fails the test at once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        try:
            got = predicate()
            if inspect.isawaitable(got):
                got = await got
            last = got
        except ignore as e:
            got, last = None, e
        if got:
            return got
        if loop.time() >= deadline:
            raise _timed_out(what, timeout, last)
        await asyncio.sleep(interval)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT_S,
    what: str = "the condition",
    interval: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """`wait_for` for synchronous code: the predicate's first truthy answer; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            got = predicate()
            last = got
        except ignore as e:
            got, last = None, e
        if got:
            return got
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last)
        time.sleep(interval)
