"""Dashboard aggregates over request rows: counts, latency percentiles and cache hits per time bucket.

Computed in Python over the window's rows rather than in SQL: percentiles are not portable between
SQLite and PostgreSQL, and a console window holds few enough requests to read in one go.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from switchyard.schemas import StatsBucket


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def pick_bucket_s(window_s: int, bucket_s: int | None) -> int:
    if bucket_s:
        return max(bucket_s, max(1, window_s // 1000))  # never more than 1000 buckets
    return max(60, window_s // 60)


@dataclass
class Row:
    created_ms: int
    status: str
    safety_action: str | None
    ttft_ms: float | None
    tpot_ms: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None


@dataclass
class _Acc:
    start_ms: int
    requests: int = 0
    errors: int = 0
    blocks: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    prompt: int = 0
    cached: int = 0
    completion: int = 0

    def add(self, r: Row) -> None:
        self.requests += 1
        if r.safety_action == "block":
            self.blocks += 1  # a block is the policy working, not an error
        elif r.status == "error":
            self.errors += 1
        if r.ttft_ms is not None:
            self.ttft.append(r.ttft_ms)
        if r.tpot_ms is not None:
            self.tpot.append(r.tpot_ms)
        self.prompt += r.prompt_tokens or 0
        self.cached += r.cached_tokens or 0
        self.completion += r.completion_tokens or 0

    def out(self) -> StatsBucket:
        return StatsBucket(
            start_ms=self.start_ms,
            requests=self.requests,
            errors=self.errors,
            blocks=self.blocks,
            ttft_p50_ms=percentile(self.ttft, 50),
            ttft_p95_ms=percentile(self.ttft, 95),
            tpot_p50_ms=percentile(self.tpot, 50),
            tpot_p95_ms=percentile(self.tpot, 95),
            prompt_tokens=self.prompt,
            cached_tokens=self.cached,
            completion_tokens=self.completion,
            cache_hit_rate=(self.cached / self.prompt) if self.prompt else None,
        )


def aggregate(
    rows: Iterable[Row], since_ms: int, until_ms: int, bucket_s: int
) -> tuple[StatsBucket, list[StatsBucket]]:
    """The whole window's totals, and one bucket per `bucket_s` (empty ones included, so charts have gaps)."""
    step = bucket_s * 1000
    first = since_ms - since_ms % step
    accs = [_Acc(start_ms=t) for t in range(first, until_ms, step)]
    total = _Acc(start_ms=since_ms)
    for r in rows:
        i = (r.created_ms - first) // step
        if 0 <= i < len(accs):
            accs[i].add(r)
            total.add(r)
    return total.out(), [a.out() for a in accs]
