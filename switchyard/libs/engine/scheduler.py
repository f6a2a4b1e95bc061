"""Iteration-level scheduler: decides, each step, which tokens of which sequences to run.

Owns the waiting and running queues and the token budget. Room in the KV cache is asked of the
KVCacheManager, which owns the block tables; the scheduler never touches blocks. Of a Request it
writes the scheduling fields only (status, num_computed, cached_tokens, finish_reason).

Policy (vLLM's `--scheduling-policy`, with aging added):
- 'fcfs': the waiting queue is in arrival order; when blocks run out, the youngest running request is
  preempted.
- 'priority': every request has a rank, `arrival + priority * aging_s` (lower priority is sooner, as in
  vLLM). That is the order of its effective priority `priority - waited / aging_s` at any moment, since
  every waiting request ages at the same rate: a request waiting `aging_s` seconds gains one level. The
  waiting queue is in rank order; when blocks run out the running request of the highest rank is
  preempted (vLLM's max by (priority, arrival)); and a waiting request that outranks a running one takes
  its seat or its blocks. Nothing starves: a request is only ever passed by requests that arrived before
  `arrival + priority * aging_s`, and because ranks never change, a preempted request never preempts its
  preemptor back.
"""

from __future__ import annotations

import bisect
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


POLICIES = ("priority", "fcfs")


class Scheduler:
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        policy: str = "priority",
        aging_s: float = 1.0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduling policy must be one of {POLICIES}, got {policy!r}")
        if aging_s < 0:
            raise ValueError(f"priority aging must be >= 0 seconds per level, got {aging_s}")
        self.kv_cache_manager = kv_cache_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.by_priority = policy == "priority"
        self.aging_s = aging_s
        # Invariant: sorted by rank; equal ranks in the order they were queued.
        self.waiting: list[Request] = []
        self.running: list[Request] = []  # admission order: the last one is the youngest
        self.stats = SchedulerStats()

    def rank(self, req: Request) -> float:
        """Lower is served sooner (see the module's docstring); fixed for the request's life."""
        if not self.by_priority:
            return req.arrival
        return req.arrival + req.params.priority * self.aging_s

    def add(self, req: Request) -> None:
        req.status = Status.WAITING
        bisect.insort_right(self.waiting, req, key=self.rank)

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
        if self.by_priority:
            self._free_seats()
        # Invariant: every request in self.running has slots for its num_computed tokens, and
        # requests before index i already have slots for this step's tokens (they are in `out`).
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            preempted_itself = False
            while kv.allocate_slots(req, n) is None:
                victim = self._last_served()
                budget += self._unschedule(victim, out)
                if self.running.index(victim) < i:
                    i -= 1
                self._preempt(victim)
                if victim is req:
                    preempted_itself = True
                    break
            if preempted_itself:
                continue
            out.append(ScheduledSeq(req, n, kv.get_block_ids(req.request_id)))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            computed = kv.get_computed_blocks(req)
            n = min(req.num_tokens - computed.num_tokens, budget)
            while kv.allocate_slots(req, n, computed) is None:
                outranked = self._outranked_by(req)
                if outranked is None:
                    return out
                budget += self._unschedule(outranked, out)
                self._preempt(outranked)
            req.num_computed = computed.num_tokens
            if req.cached_tokens < 0:
                req.cached_tokens = computed.num_tokens
            self.waiting.pop(0)
            req.status = Status.RUNNING
            self.running.append(req)
            out.append(ScheduledSeq(req, n, kv.get_block_ids(req.request_id)))
            budget -= n
        return out

    def _last_served(self) -> Request:
        """The running request to preempt when blocks run out: the youngest (fcfs) or the highest rank."""
        if not self.by_priority:
            return self.running[-1]
        return max(reversed(self.running), key=self.rank)

    def _outranked_by(self, req: Request) -> Request | None:
        """Under the priority policy, the running request of the highest rank when `req` outranks it."""
        if not self.by_priority or not self.running:
            return None
        victim = self._last_served()
        return victim if self.rank(victim) > self.rank(req) else None

    def _free_seats(self) -> None:
        """With every seat taken, the head of the queue takes the seat of a running request it outranks."""
        while self.waiting and len(self.running) >= self.max_num_seqs:
            victim = self._outranked_by(self.waiting[0])
            if victim is None:
                return
            self._preempt(victim)

    @staticmethod
    def _unschedule(req: Request, out: list[ScheduledSeq]) -> int:
        """Take a request out of this step's batch; the budget its chunk held."""
        for j, seq in enumerate(out):
            if seq.request is req:
                del out[j]
                return seq.num_new_tokens
        return 0

    def _preempt(self, req: Request) -> None:
        """Drop a request's KV and queue it again by its rank, for recompute."""
        self.running.remove(req)
        self.kv_cache_manager.free(req)
        req.num_computed = 0
        self.add(req)
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
