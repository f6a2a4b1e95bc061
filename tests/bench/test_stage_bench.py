"""The stage benchmark's arithmetic: the per-request / per-token split, the relayed rate, the report."""

from __future__ import annotations

import argparse

import pytest

from bench.stage_bench import render, split, summarize


def run(level: int, tokens: int, requests: int, cpu: dict[str, float], itl: float, tpot: float) -> dict[str, object]:
    received = requests * tokens
    return {
        "level": level,
        "tokens": tokens,
        "requests": requests,
        "errors": 0,
        "received_tokens": received,
        "wall_s": received / 1000,
        "tok_s": 1000.0 * level,
        "client_ttft_ms": 20.0,
        "client_ttft_p95_ms": 30.0,
        "gap_ms": itl,
        "itl_ms": itl,
        "deltas_per_token": 0.8,
        "engine_ttft_ms": 10.0,
        "engine_tpot_ms": tpot,
        "cpu_s": cpu,
    }


def cpu(requests: int, tokens: int, per_request_us: float, per_token_us: float) -> float:
    return requests * (per_request_us + tokens * per_token_us) / 1e6


def test_two_lengths_split_a_stages_cpu_into_per_request_and_per_token() -> None:
    short = run(8, 32, 100, {"gateway": cpu(100, 32, 4000, 50), "safety_out/classifier": cpu(100, 32, 0, 100)}, 5, 5)
    long = run(8, 128, 100, {"gateway": cpu(100, 128, 4000, 50), "safety_out/classifier": cpu(100, 128, 0, 100)}, 5, 5)
    got = split(short, long)
    assert got["gateway"] == pytest.approx((4000, 50))
    assert got["safety_out/classifier"] == pytest.approx((0, 100), abs=1e-6)


def test_the_relayed_rate_is_the_fastest_level_whose_itl_stays_within_ten_percent() -> None:
    c = {"gateway": 1.0}
    runs = [
        run(1, 32, 16, c, 5.0, 5.0),
        run(1, 128, 16, c, 5.0, 5.0),
        run(32, 32, 64, c, 5.4, 5.0),
        run(32, 128, 64, c, 5.4, 5.0),  # within 10 %
        run(256, 32, 512, c, 9.0, 6.0),
        run(256, 128, 512, c, 9.0, 6.0),  # 1.5x the engine's TPOT: the stack is behind
    ]
    s = summarize(runs, [32, 128])
    assert s["relayed_within_10pct"] == {"level": 32, "tok_s": 32_000.0}
    args = argparse.Namespace(lengths=[32, 128], answer=256)
    text = render("sim", args, s, 12.0)
    assert "**32000 tok/s** (32 streams)" in text
    assert text.startswith("<!-- stage-bench:sim begin -->") and text.rstrip().endswith("<!-- stage-bench:sim end -->")
