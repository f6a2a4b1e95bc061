"""Concurrent callers share classifier passes, and each gets exactly its own rows."""

from __future__ import annotations

import asyncio

import pytest

from switchyard.libs.safety.batcher import ScoreBatcher
from switchyard.libs.safety.guard import InputGuard, shared_classifier

TEXTS = [
    "How long should I boil an egg?",
    "Write a haiku about autumn leaves.",
    "Here is how to make sarin nerve gas at home.",
    "What is the capital of Australia?",
    "My order A1001 has not arrived.",
    "Explain what a Python decorator does.",
]


async def test_concurrent_callers_share_passes_and_get_their_own_rows() -> None:
    clf = shared_classifier()
    batcher = ScoreBatcher(clf, nice=5, threads=1)
    try:
        # Hold the worker on a first pass so the next callers queue behind it and go in one pass.
        first = asyncio.create_task(batcher.score_many(["warm"]))
        rest = [asyncio.create_task(batcher.score_many([t])) for t in TEXTS]
        got = [await first] + [await r for r in rest]
        assert batcher.done_texts == len(TEXTS) + 1
        assert batcher.passes < len(TEXTS) + 1
        alone = clf.score_many(["warm", *TEXTS])
        for rows, want in zip(got, alone, strict=True):
            assert rows[0].keys() == want.keys()
            for c in want:
                assert rows[0][c] == pytest.approx(want[c], abs=1e-4)
    finally:
        await batcher.close()


async def test_batched_check_matches_check() -> None:
    guard = InputGuard()
    batcher = ScoreBatcher(guard.classifier)
    try:
        batched = await asyncio.gather(*(guard.check_many_batched([t], batcher, source="model") for t in TEXTS))
        for t, b in zip(TEXTS, batched, strict=True):
            plain = guard.check(t, source="model")
            assert [(v.category, v.action) for v in b[0]] == [(v.category, v.action) for v in plain]
    finally:
        await batcher.close()
