"""The test suite's one way to wait: it returns the first truthy answer and fails at its deadline."""

from __future__ import annotations

import itertools

import pytest

from tests.wait import wait_for, wait_until


async def test_wait_for_returns_the_first_truthy_answer_and_awaits_coroutines() -> None:
    n = itertools.count()

    async def third() -> int | None:
        i = next(n)
        return i if i >= 2 else None

    assert await wait_for(third, timeout=5, interval=0) == 2


async def test_wait_for_fails_at_its_deadline_naming_what_and_the_last_answer() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the moon; last: \[\]"):
        await wait_for(lambda: [], timeout=0.05, what="the moon", interval=0.01)


async def test_ignored_errors_count_as_not_yet_and_others_propagate() -> None:
    calls = itertools.count()

    def flaky() -> bool:
        if next(calls) < 2:
            raise ConnectionError("starting")
        return True

    assert await wait_for(flaky, timeout=5, interval=0, ignore=(ConnectionError,)) is True
    with pytest.raises(KeyError):
        await wait_for(lambda: {}["x"], timeout=5, ignore=(ConnectionError,))


def test_wait_until_is_the_synchronous_twin() -> None:
    n = itertools.count()
    assert wait_until(lambda: next(n) == 3, timeout=5, interval=0) is True
    with pytest.raises(AssertionError, match="waiting for never"):
        wait_until(lambda: False, timeout=0.05, what="never", interval=0.01)
