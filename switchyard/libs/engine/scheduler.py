"""Iteration-level scheduler: decides, each step, which tokens of which sequences to run.

Owns the waiting and running queues and the token budget. Room in the KV cache is asked of the
KVCacheManager, which owns the block tables; the scheduler never touches blocks. Of a Request it
writes the scheduling fields only (status, num_computed, cached_tokens, finish_reason).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from switchyard.libs.engine.kv_cache_manager import KVCacheManager
from switchyard.libs.engine.request import Request, Status


@dataclass
class ScheduledSeq:
    request: Request
    num_new_tokens: int  # tokens all_ids[num_computed : num_computed + n] run this step
    # The request's block table, holding slots for this chunk (the manager's list: read only).
    block_ids: list[int]

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a new token is sampled."""
        r = self.request
        return r.num_computed + self.num_new_tokens == r.num_tokens


@dataclass
class SchedulerStats:
    preemptions: int = 0


class Scheduler:
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
    ) -> None:
        self.kv_cache_manager = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the youngest
        self.stats = SchedulerStats()

    def add(self, req: Request) -> None:
        req.status = Status.WAITING
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, request_id: str) -> Request | None:
        for r in self.running:
            if r.request_id == request_id:
                return r
        for r in self.waiting:
            if r.request_id == request_id:
                return r
        return None

    def schedule(self) -> list[ScheduledSeq]:
        kv = self.kv_cache_manager
        budget = self.max_num_batched_tokens
        out: list[ScheduledSeq] = []
        # Invariant: every request in self.running has slots for its num_computed tokens, and
        # requests before index i already have slots for this step's tokens.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            if not self._allocate_or_preempt(req, n):
                break  # it was the youngest and got preempted itself
            out.append(ScheduledSeq(req, n, kv.get_block_ids(req.request_id)))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            computed = kv.get_computed_blocks(req)
            n = min(req.num_tokens - computed.num_tokens, budget)
            if kv.allocate_slots(req, n, computed) is None:
                break
            req.num_computed = computed.num_tokens
            if req.cached_tokens < 0:
                req.cached_tokens = computed.num_tokens
            self.waiting.popleft()
            req.status = Status.RUNNING
            self.running.append(req)
            out.append(ScheduledSeq(req, n, kv.get_block_ids(req.request_id)))
            budget -= n
        return out

    def _allocate_or_preempt(self, req: Request, num_new_tokens: int) -> bool:
        """Slots for a running request's next tokens, preempting the youngest request until they
        fit; False when the request itself was the one preempted."""
        while self.kv_cache_manager.allocate_slots(req, num_new_tokens) is None:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        """Drop a request's KV and send it back to the front of the queue for recompute."""
        self.running.remove(req)
        self.kv_cache_manager.free(req)
        req.num_computed = 0
        req.status = Status.WAITING
        self.waiting.appendleft(req)
        self.stats.preemptions += 1

    def advance(self, seq: ScheduledSeq) -> None:
        """Record that a scheduled chunk ran; newly full blocks become reusable prefixes."""
        req = seq.request
        req.num_computed += seq.num_new_tokens
        self.kv_cache_manager.cache_full_blocks(req)

    def finish(self, req: Request, reason: str) -> None:
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv_cache_manager.free(req)
        req.status = Status.FINISHED
        req.finish_reason = reason
