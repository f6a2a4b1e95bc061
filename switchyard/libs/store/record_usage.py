"""Usage per API key, summed in Python over the key's rows in the window (as record_stats.py does): the
same on SQLite and PostgreSQL, and a key's window is few enough rows to read in one go."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from switchyard.schemas.keys import DayUsage, KeyUsage, KeyUsageQuery, ModelUsage, UsageCount


def _add(acc: UsageCount, prompt: int, completion: int) -> None:
    acc.requests += 1
    acc.prompt_tokens += prompt
    acc.completion_tokens += completion
    acc.total_tokens += prompt + completion


def key_usage(q: KeyUsageQuery, rows: Iterable[tuple[int, str | None, int | None, int | None]]) -> KeyUsage:
    """`rows`: (created_ms, model, prompt_tokens, completion_tokens) of each of the key's requests."""
    out = KeyUsage(key_id=q.key_id, since_ms=q.since_ms, until_ms=q.until_ms)
    models: dict[str, ModelUsage] = {}
    days: dict[str, DayUsage] = {}
    for created_ms, model, prompt, completion in rows:
        p, c = prompt or 0, completion or 0
        day = dt.datetime.fromtimestamp(created_ms / 1000, dt.UTC).strftime("%Y-%m-%d")
        name = model or ""
        _add(out.total, p, c)
        _add(models.setdefault(name, ModelUsage(model=name)), p, c)
        _add(days.setdefault(day, DayUsage(day=day)), p, c)
    out.by_model = sorted(models.values(), key=lambda m: -m.total_tokens)
    out.by_day = [days[d] for d in sorted(days)]
    return out
