"""A pass started early is taken by its request only on the same input; one nobody takes is dropped."""

from __future__ import annotations

import asyncio

from switchyard.libs.early import EarlyPasses


async def test_a_request_takes_the_pass_started_on_its_own_input() -> None:
    early: EarlyPasses[str] = EarlyPasses()
    runs: list[str] = []

    async def run(text: str) -> str:
        runs.append(text)
        return text.upper()

    early.start("r1", ("hello",), lambda: run("hello"))
    early.start("r1", ("hello",), lambda: run("hello"))  # a redelivered request starts nothing more
    task = early.take("r1", ("hello",))
    assert task is not None and await task == "HELLO"
    assert runs == ["hello"] and early.taken == 1
    assert early.take("r1", ("hello",)) is None  # taken once


async def test_a_pass_on_other_input_is_not_taken() -> None:
    early: EarlyPasses[str] = EarlyPasses()
    early.start("r1", ("before",), lambda: asyncio.sleep(0, "x"))
    assert early.take("r1", ("after",)) is None
    assert early.take("r2", ("before",)) is None
    assert len(early) == 0 and early.taken == 0


async def test_a_pass_nobody_takes_is_dropped_after_its_ttl() -> None:
    early: EarlyPasses[None] = EarlyPasses(ttl_s=0.0)
    never = asyncio.Event()
    early.start("old", (), never.wait)
    old = early._pending["old"][2]
    early.start("new", (), never.wait)  # every start drops what has waited past the TTL
    await asyncio.sleep(0)
    assert "old" not in early._pending and old.cancelled()
