"""Token budgets per API key and UTC day / month, counted where every gateway counts them.

One JSON entry per key in a JetStream key-value bucket (`{"day", "d", "month", "m"}`: the period each
count belongs to and its tokens), debited by compare-and-set as the limiter's buckets are. Why here and
not from the request records: every gateway debits the same entry the moment a request ends and reads it
before admitting the next one, so a key's spend is exact across gateways within one request; the records
reach the store later (the logger batches them off a durable stream, and may be behind or down), so a
key sending from several gateways at once would overspend by however far the logger lags.

Only keys that have a budget are counted (the others cost nothing). A chat request reserves before it
runs: at most what the key has left, up to the most it could use (its prompt window: prompt and
max_tokens), in one compare-and-set, so concurrent requests cannot all take the same last tokens; once it
ends the reservation is settled to what it used (the difference is given back). A key therefore never
spends more than its budget, however many requests it sends at once. A gateway that dies between the two
leaves its reservation spent (the key loses at most one window per request in flight, never overspends).
Requests with no window to reserve (embeddings, token counts: bounded by their input limits) are admitted
while something is left and debited after.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Literal

import structlog

from switchyard.libs.bus import Bus
from switchyard.libs.bus.kv import CasKV

log = structlog.get_logger()
Period = Literal["day", "month"]
# An entry untouched for longer than a month holds nothing that counts any more.
TTL_S = 32 * 24 * 3600


@dataclass(frozen=True)
class Spend:
    day: int
    month: int


@dataclass(frozen=True)
class BudgetRefusal:
    budget: Period
    spent: int
    limit: int
    resets_ms: int

    def retry_after_s(self, now_ms: int) -> float:
        return max(1.0, (self.resets_ms - now_ms) / 1000)


def periods(now_ms: int) -> tuple[str, str]:
    t = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%Y-%m")


def resets_ms(period: Period, now_ms: int) -> int:
    """When the current UTC day or month ends."""
    t = dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
    start = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC)
    if period == "day":
        end = start + dt.timedelta(days=1)
    else:
        end = dt.datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=dt.UTC)
    return int(end.timestamp() * 1000)


def _key(key_id: str) -> str:
    return "k_" + hashlib.sha256(key_id.encode()).hexdigest()[:32]


def _spend(raw: bytes | None, now_ms: int) -> Spend:
    if not raw:
        return Spend(0, 0)
    d = json.loads(raw)
    day, month = periods(now_ms)
    return Spend(int(d["d"]) if d.get("day") == day else 0, int(d["m"]) if d.get("month") == month else 0)


class BudgetBusy(Exception):
    """Other gateways kept winning the key's entry: nothing was reserved."""


def _left(spend: Spend, day: int | None, month: int | None, now_ms: int) -> tuple[int, BudgetRefusal | None]:
    """Tokens the key has left this day and month; with the refusal to give when that is none."""
    lefts: list[tuple[int, BudgetRefusal]] = []
    if day is not None:
        lefts.append((day - spend.day, BudgetRefusal("day", spend.day, day, resets_ms("day", now_ms))))
    if month is not None:
        lefts.append((month - spend.month, BudgetRefusal("month", spend.month, month, resets_ms("month", now_ms))))
    left, refusal = min(lefts, key=lambda x: x[0])
    return left, (refusal if left <= 0 else None)


class KeyBudgets:
    def __init__(self, kv: CasKV, attempts: int = 25):
        self.kv = kv
        self.attempts = attempts
        # One reservation at a time per key in this gateway: a burst of one key's requests then never
        # races itself for the entry (only another gateway's write can conflict).
        self._reserving: dict[str, asyncio.Lock] = {}
        # Tokens waiting to be debited, per key, and the one task writing them: a burst of a key's
        # requests ending together is one compare-and-set, not a race among themselves.
        self._pending: dict[str, int] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}

    @classmethod
    async def open(cls, bus: Bus, bucket: str) -> KeyBudgets:
        return cls(await CasKV.open(bus, bucket, ttl_s=TTL_S))

    async def spent(self, key_id: str, now_ms: int) -> Spend:
        raw, _ = await self.kv.get(_key(key_id))
        return _spend(raw, now_ms)

    async def check(self, key_id: str, day: int | None, month: int | None, now_ms: int) -> BudgetRefusal | None:
        """The budget this key has spent, or None while both have tokens left."""
        if day is None and month is None:
            return None
        spend = await self.spent(key_id, now_ms)
        if day is not None and spend.day >= day:
            return BudgetRefusal("day", spend.day, day, resets_ms("day", now_ms))
        if month is not None and spend.month >= month:
            return BudgetRefusal("month", spend.month, month, resets_ms("month", now_ms))
        return None

    async def reserve(
        self, key_id: str, want: int, day: int | None, month: int | None, now_ms: int
    ) -> int | BudgetRefusal:
        """Take up to `want` of the tokens the key has left (counted as spent from now on), or the refusal
        when none are left. Settle with `debit(key_id, used - reserved, ...)` once the request ends."""
        lock = self._reserving.setdefault(key_id, asyncio.Lock())
        async with lock:
            d, m = periods(now_ms)
            for attempt in range(self.attempts):
                raw, revision = await self.kv.get(_key(key_id))
                spend = _spend(raw, now_ms)
                left, refusal = _left(spend, day, month, now_ms)
                if refusal is not None:
                    return refusal
                take = min(want, left)
                value = {"day": d, "d": spend.day + take, "month": m, "m": spend.month + take}
                if await self.kv.put_if(_key(key_id), json.dumps(value).encode(), revision):
                    return take
                await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise BudgetBusy(f"key budget contention: nothing reserved after {self.attempts} tries")

    async def debit(self, key_id: str, tokens: int, now_ms: int) -> None:
        """Add `tokens` to the key's day and month (fewer than none gives a reservation's rest back);
        returns once they are written (or given up)."""
        if tokens == 0:
            return
        self._pending[key_id] = self._pending.get(key_id, 0) + tokens
        writer = self._writers.get(key_id)
        if writer is None or writer.done():
            writer = self._writers[key_id] = asyncio.create_task(self._drain(key_id, now_ms))
        await asyncio.shield(writer)

    async def _drain(self, key_id: str, now_ms: int) -> None:
        try:
            while self._pending.get(key_id):
                tokens = self._pending.pop(key_id)
                try:
                    await self._write(key_id, tokens, now_ms)
                except Exception as e:
                    # Budgets must not take the gateway down with the KV store; the spend is lost.
                    log.warning("key budget unavailable: usage not debited", error=str(e) or type(e).__name__)
        finally:
            self._writers.pop(key_id, None)

    async def _write(self, key_id: str, tokens: int, now_ms: int) -> None:
        day, month = periods(now_ms)
        for attempt in range(self.attempts):
            raw, revision = await self.kv.get(_key(key_id))
            spend = _spend(raw, now_ms)
            # A reservation given back in a later period than it was taken in takes nothing from the new one.
            d, m = max(0, spend.day + tokens), max(0, spend.month + tokens)
            value = {"day": day, "d": d, "month": month, "m": m}
            if await self.kv.put_if(_key(key_id), json.dumps(value).encode(), revision):
                return
            await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        log.warning("key budget contention: usage not debited", key_id=key_id, tokens=tokens)
