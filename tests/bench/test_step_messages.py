"""The hop-1 bus benchmark runs both shapes to the end and reports a row for each."""

from __future__ import annotations

import pytest

from bench.step_messages import main


async def test_both_shapes_deliver_every_frame(capsys: pytest.CaptureFixture[str]) -> None:
    await main(streams=4, steps=5, rounds=1)
    out = capsys.readouterr().out
    assert "| 1 | per frame |" in out and "| 1 | per step |" in out
