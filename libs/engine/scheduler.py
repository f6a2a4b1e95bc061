"""Iteration-level scheduler: decides, each step, which tokens of which sequences to run.

Owns the waiting and running queues. Blocks are obtained from and returned to the BlockPool;
per-request counters live on the Request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from libs.engine.block_pool import BlockPool
from libs.engine.request import Request, Status


@dataclass
class ScheduledSeq:
    request: Request
    num_new_tokens: int  # tokens all_ids[num_computed : num_computed + n] run this step

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a new token is sampled."""
        r = self.request
        return r.num_computed + self.num_new_tokens == r.num_tokens


@dataclass
class SchedulerStats:
    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0
    preemptions: int = 0


class Scheduler:
    def __init__(
        self,
        pool: BlockPool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
    ) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the youngest
        self.stats = SchedulerStats()

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

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
        budget = self.max_num_batched_tokens
        out: list[ScheduledSeq] = []
        # Invariant: every request in self.running holds blocks for its num_computed tokens, and
        # requests before index i already have blocks for this step's tokens.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            need = self._blocks_for(req.num_computed + n) - len(req.block_ids)
            while need > self.pool.num_free and req in self.running:
                self._preempt(self.running[-1])
            if req not in self.running:
                break  # it was the youngest and got preempted itself
            if need > 0:
                req.block_ids.extend(self.pool.allocate(need))
            out.append(ScheduledSeq(req, n))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            # Keep at least one token to compute: its logits give the next token.
            max_hit = (req.num_tokens - 1) // self.block_size
            hashes = req.hashes(self.block_size)
            hit = self.pool.lookup(hashes[:max_hit])
            hit_tokens = len(hit) * self.block_size
            # Past the full blocks, a released sequence's partial last block may hold more of
            # this prompt (typically the end of the previous answer in a conversation).
            tail = self.pool.match_tail(
                hashes[len(hit) - 1] if hit else None, req.all_ids[hit_tokens : req.num_tokens - 1]
            )
            reused = hit_tokens + (tail[1] if tail else 0)
            n = min(req.num_tokens - reused, budget)
            own = hit + ([tail[0]] if tail else [])
            need = self._blocks_for(reused + n) - len(own)
            reclaimed = sum(1 for b in own if self.pool.blocks[b].ref_cnt == 0)
            if need + reclaimed > self.pool.num_free:
                break
            self.pool.touch(hit)
            if tail:
                self.pool.adopt_tail(tail[0])
            req.block_ids = own + self.pool.allocate(need)
            req.num_computed = reused
            req.num_cached_blocks = len(hit)
            if req.cached_tokens < 0:
                req.cached_tokens = reused
            self.stats.prefix_cache_queries_tokens += req.num_tokens
            self.stats.prefix_cache_hits_tokens += reused
            self.waiting.popleft()
            req.status = Status.RUNNING
            self.running.append(req)
            out.append(ScheduledSeq(req, n))
            budget -= n
        return out

    def _preempt(self, req: Request) -> None:
        """Drop a request's KV and send it back to the front of the queue for recompute."""
        self.running.remove(req)
        self._release(req)
        req.num_computed = 0
        req.num_cached_blocks = 0
        req.status = Status.WAITING
        self.waiting.appendleft(req)
        self.stats.preemptions += 1

    def _release(self, req: Request) -> None:
        """Return a request's blocks, keeping its partly filled last block as a reusable tail."""
        bs = self.block_size
        full = req.num_computed // bs
        if req.num_computed % bs and full < len(req.block_ids):
            parent = req.hashes(bs)[full - 1] if full else None
            self.pool.cache_tail(req.block_ids[full], parent, req.all_ids[full * bs : req.num_computed])
        self.pool.free(req.block_ids)
        req.block_ids = []

    def advance(self, seq: ScheduledSeq) -> None:
        """Record that a scheduled chunk ran; newly full blocks become reusable prefixes."""
        req = seq.request
        req.num_computed += seq.num_new_tokens
        full = req.num_computed // self.block_size
        if full > req.num_cached_blocks:
            hashes = req.hashes(self.block_size)
            for j in range(req.num_cached_blocks, full):
                self.pool.cache_block(req.block_ids[j], hashes[j])
            req.num_cached_blocks = full

    def finish(self, req: Request, reason: str) -> None:
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._release(req)
        req.status = Status.FINISHED
        req.finish_reason = reason
