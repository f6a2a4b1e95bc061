"""Per-tenant token buckets (requests/minute, tokens/minute) and concurrent-stream leases.

One JSON entry per tenant in a JetStream key-value bucket, updated with compare-and-set on the entry's
revision: two gateways that race re-read and retry, so they enforce one limit between them. Streams are
leases that expire, so a gateway that dies mid-stream cannot leak a tenant's concurrency forever.
Tokens are debited after the answer (their count is unknown before); a tenant that overdraws waits
until the bucket refills above zero.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from switchyard.libs.bus import Bus
from switchyard.libs.bus.kv import CasKV

log = structlog.get_logger()
MAX_KNOWN_TENANTS = 10_000


class Limits(Protocol):
    requests_per_minute: float
    tokens_per_minute: float
    concurrent_streams: int


@dataclass(frozen=True)
class Refusal:
    limit: str  # requests_per_minute | tokens_per_minute | concurrent_streams
    message: str
    retry_after_s: float


@dataclass
class _State:
    req: float
    tok: float
    ts_ms: int
    leases: dict[str, int] = field(default_factory=dict)

    @classmethod
    def fresh(cls, limits: Limits, now_ms: int) -> _State:
        return cls(float(limits.requests_per_minute), float(limits.tokens_per_minute), now_ms)

    def refill(self, limits: Limits, now_ms: int) -> None:
        elapsed = max(0, now_ms - self.ts_ms) / 60_000
        self.req = min(float(limits.requests_per_minute), self.req + elapsed * limits.requests_per_minute)
        self.tok = min(float(limits.tokens_per_minute), self.tok + elapsed * limits.tokens_per_minute)
        self.ts_ms = now_ms
        self.leases = {rid: exp for rid, exp in self.leases.items() if exp > now_ms}

    def dump(self) -> bytes:
        return json.dumps({"req": self.req, "tok": self.tok, "ts": self.ts_ms, "leases": self.leases}).encode()

    @classmethod
    def load(cls, raw: bytes) -> _State:
        d: dict[str, Any] = json.loads(raw)
        return cls(float(d["req"]), float(d["tok"]), int(d["ts"]), {k: int(v) for k, v in d.get("leases", {}).items()})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(tenant: str) -> str:
    # Tenant names may hold characters a KV key cannot; a digest is always a valid, fixed-length key.
    return "t_" + hashlib.sha256(tenant.encode()).hexdigest()[:32]


@dataclass
class _Op:
    """One admission (`lease_s` set) or settlement (`tokens` debited) waiting for its tenant's next write."""

    rid: str
    lease_s: float | None = None
    tokens: int = 0
    # A write (conversations, memory, files, feedback, keys): one request from the bucket, no lease.
    write: bool = False
    done: asyncio.Future[Refusal | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class _Queue:
    ops: list[_Op] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None


class Limiter:
    def __init__(self, kv: CasKV, attempts: int = 25, timeout_s: float = 2.0):
        self.kv = kv
        self._queues: dict[str, _Queue] = {}
        self.attempts = attempts
        # A bucket electing a new leader (a node died) would hold each call for nats-py's 5 s; the
        # limiter gives up sooner and lets the request through, as when the store is down.
        self.timeout_s = timeout_s
        # Per tenant, the state this gateway last wrote and the revision it got: the next commit writes
        # against that revision without reading the entry first. Another gateway's write in between fails
        # the compare-and-set, and only then is the entry read (at many streams the entry holds every
        # lease, and reading it back after each of our own writes cost a round trip and a decode a request).
        self._known: dict[str, tuple[_State, int]] = {}

    @classmethod
    async def open(cls, bus: Bus, bucket: str) -> Limiter:
        # Idle tenants' entries age out; a full bucket is the same as an absent entry. In a cluster, kept
        # on the bus's JetStream replicas: on one node that died, every admission would wait 5 s for it.
        return cls(await CasKV.open(bus, bucket, ttl_s=3600))

    async def _read(self, tenant: str, limits: Limits, now: int) -> tuple[_State, int]:
        value, revision = await self.kv.get(_key(tenant))
        if value is None:
            return _State.fresh(limits, now), revision
        state = _State.load(value)
        state.refill(limits, now)
        return state, revision

    async def _backoff(self, attempt: int) -> None:
        await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))

    async def admit(self, tenant: str, rid: str, limits: Limits, lease_s: float) -> Refusal | None:
        """Take one request and one stream lease, or say which limit refuses and for how long."""
        try:
            return await self._queued(tenant, limits, _Op(rid, lease_s=lease_s))
        except Exception as e:
            # The limiter guards the pipeline; it must not take the gateway down with the KV store.
            log.warning("rate limiter unavailable: admitting", error=str(e) or type(e).__name__)
        return None

    async def admit_write(self, tenant: str, limits: Limits) -> Refusal | None:
        """Take one request for a write route from the same per-minute bucket as the tenant's chats (no
        stream lease: a write holds nothing open), or say how long until one is free."""
        try:
            return await self._queued(tenant, limits, _Op("", write=True))
        except Exception as e:
            log.warning("rate limiter unavailable: admitting", error=str(e) or type(e).__name__)
        return None

    async def settle(self, tenant: str, rid: str, tokens: int, limits: Limits) -> None:
        """Release the stream lease and debit the tokens the request used."""
        try:
            await self._queued(tenant, limits, _Op(rid, tokens=tokens))
        except Exception as e:
            log.warning("rate limiter unavailable: usage not debited", error=str(e) or type(e).__name__)

    async def _queued(self, tenant: str, limits: Limits, op: _Op) -> Refusal | None:
        """Group commit: this gateway's operations on one tenant wait in one queue, and each write takes
        every one waiting (one read and one compare-and-set for all of them). Only another gateway's write
        can conflict: a thousand streams of one tenant no longer race each other for its entry (they did,
        and most admissions timed out after 2 s)."""
        queue = self._queues.setdefault(tenant, _Queue())
        queue.ops.append(op)
        if queue.writer is None or queue.writer.done():
            queue.writer = asyncio.create_task(self._drain(tenant, limits, queue))
        async with asyncio.timeout(self.timeout_s):
            return await asyncio.shield(op.done)

    async def _drain(self, tenant: str, limits: Limits, queue: _Queue) -> None:
        # Invariant: every op taken from the queue has its future resolved (a result, or an error).
        try:
            while queue.ops:
                ops, queue.ops = queue.ops, []
                try:
                    results = await self._commit(tenant, limits, ops)
                except Exception as e:
                    for op in ops:
                        if not op.done.done():
                            op.done.set_exception(e)
                    continue
                for op, result in zip(ops, results, strict=True):
                    if not op.done.done():
                        op.done.set_result(result)
        finally:
            if self._queues.get(tenant) is queue and not queue.ops:
                del self._queues[tenant]

    async def _commit(self, tenant: str, limits: Limits, ops: list[_Op]) -> list[Refusal | None]:
        for attempt in range(self.attempts):
            now = _now_ms()
            known = self._known.pop(tenant, None)
            if known is not None:
                state, revision = known
                state.refill(limits, now)
            else:
                state, revision = await self._read(tenant, limits, now)
            results = [self._apply(state, limits, op, now) for op in ops]
            written = await self.kv.swap(_key(tenant), state.dump(), revision)
            if written is not None:
                self._known[tenant] = (state, written)
                while len(self._known) > MAX_KNOWN_TENANTS:
                    self._known.pop(next(iter(self._known)))
                return results
            if known is None:  # a stale copy of ours is no contention: read the entry at once
                await self._backoff(attempt)
        log.warning("rate limit contention: admitting without a lease", tenant=tenant)
        return [None] * len(ops)

    @staticmethod
    def _apply(state: _State, limits: Limits, op: _Op, now: int) -> Refusal | None:
        if op.write:
            if state.req < 1:
                return _per_minute(state, limits)
            state.req -= 1
            return None
        if op.lease_s is None:  # a settle
            state.leases.pop(op.rid, None)
            state.tok -= op.tokens
            return None
        if len(state.leases) >= limits.concurrent_streams:
            soonest = min(state.leases.values()) - now
            return Refusal(
                "concurrent_streams",
                f"rate limit: {limits.concurrent_streams} concurrent streams for this tier are in use",
                max(1.0, min(soonest / 1000, 5.0)),
            )
        if state.req < 1:
            return _per_minute(state, limits)
        if state.tok <= 0:
            wait = (1 - state.tok) * 60 / limits.tokens_per_minute
            return Refusal(
                "tokens_per_minute", f"rate limit: {limits.tokens_per_minute:g} tokens per minute for this tier", wait
            )
        state.req -= 1
        state.leases[op.rid] = now + int(op.lease_s * 1000)
        return None


def _per_minute(state: _State, limits: Limits) -> Refusal:
    wait = (1 - state.req) * 60 / limits.requests_per_minute
    return Refusal(
        "requests_per_minute", f"rate limit: {limits.requests_per_minute:g} requests per minute for this tier", wait
    )
