"""Each running request's block table: which blocks of the pool hold the KV of which positions.

The split follows vLLM v1: the scheduler owns the queues and the token budget and asks this
manager for room; this manager owns the block tables (and how far each is registered in the
prefix cache) and talks to the pool; the BlockPool owns the blocks themselves (ref counts, hashes,
the free queue). The manager reads a Request (tokens, `num_computed`, hashes) and writes none of
its fields.

Per request, in order: `get_computed_blocks` (what the prefix cache already holds) ->
`allocate_slots` (room for this step's tokens, taking the computed blocks) -> after the step,
`cache_full_blocks` (newly full blocks become reusable prefixes) -> ... -> `free`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.libs.engine.block_pool import BlockPool
from switchyard.libs.engine.request import Request


@dataclass(frozen=True)
class ComputedBlocks:
    """The cached prefix a waiting request can start from."""

    block_ids: list[int] = field(default_factory=list)  # full blocks, leading, in order
    # A released sequence's partly filled last block that continues the prefix (see
    # BlockPool.cache_tail); it becomes the request's own block, not a shared one.
    tail_block: int | None = None
    num_tokens: int = 0  # tokens whose KV these blocks hold: the request computes from here

    @property
    def all_block_ids(self) -> list[int]:
        return self.block_ids if self.tail_block is None else [*self.block_ids, self.tail_block]


NO_COMPUTED_BLOCKS = ComputedBlocks()


@dataclass
class PrefixCacheStats:
    queries_tokens: int = 0  # prompt tokens of admitted requests
    hits_tokens: int = 0  # of those, tokens served from the cache


class KVCacheManager:
    def __init__(self, block_pool: BlockPool) -> None:
        self.block_pool = block_pool
        self.block_size = block_pool.block_size
        self.enable_caching = block_pool.enable_prefix_caching
        # Invariant: the KV of request.all_ids[:request.num_computed] is in the blocks of its table.
        self._tables: dict[str, list[int]] = {}
        # Leading blocks of each table already registered in the prefix cache.
        self._num_cached_blocks: dict[str, int] = {}
        self.stats = PrefixCacheStats()

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.block_pool.num_used

    def get_block_ids(self, request_id: str) -> list[int]:
        """The request's block table (the live list: read it, never change it)."""
        return self._tables.get(request_id, [])

    def get_computed_blocks(self, req: Request) -> ComputedBlocks:
        """The longest cached prefix of a request that holds no blocks yet: every leading full
        block whose hash is cached, then a released tail block that continues it."""
        if not self.enable_caching:
            return NO_COMPUTED_BLOCKS
        bs = self.block_size
        # Keep at least one token to compute: its logits give the next token.
        known = req.num_tokens - 1
        hashes = req.hashes(bs)
        hit = self.block_pool.lookup(hashes[: known // bs])
        hit_tokens = len(hit) * bs
        # Past the full blocks, a released sequence's partial last block may hold more of this
        # prompt (typically the end of the previous answer in a conversation).
        tail = self.block_pool.match_tail(hashes[len(hit) - 1] if hit else req.root_hash, req.all_ids[hit_tokens:known])
        if tail is None:
            return ComputedBlocks(hit, None, hit_tokens)
        return ComputedBlocks(hit, tail[0], hit_tokens + tail[1])

    # -- mutations -----------------------------------------------------------------------
    def allocate_slots(
        self, req: Request, num_new_tokens: int, computed: ComputedBlocks = NO_COMPUTED_BLOCKS
    ) -> list[int] | None:
        """Room in the request's table for `num_new_tokens` past what it has computed; for a
        request being admitted, `computed` (from get_computed_blocks) starts its table. Returns
        the newly allocated block ids, or None, changing nothing, when the pool lacks them."""
        table = self._tables.get(req.request_id)
        if table is not None:
            assert not computed.all_block_ids, "computed blocks are only taken at admission"
            need = self._blocks_for(req.num_computed + num_new_tokens) - len(table)
            if need > self.block_pool.num_free:
                return None
            new = self.block_pool.allocate(need) if need > 0 else []
            table.extend(new)
            return new
        reused = computed.all_block_ids
        need = self._blocks_for(computed.num_tokens + num_new_tokens) - len(reused)
        # Reused blocks that nobody holds sit in the free queue: taking them costs free blocks too.
        if need + self.block_pool.num_evictable(reused) > self.block_pool.num_free:
            return None
        # Take the reused blocks out of the free queue before allocating, which evicts from it.
        self.block_pool.touch(computed.block_ids)
        if computed.tail_block is not None:
            self.block_pool.adopt_tail(computed.tail_block)
        new = self.block_pool.allocate(need)
        self._tables[req.request_id] = reused + new
        self._num_cached_blocks[req.request_id] = len(computed.block_ids)
        self.stats.queries_tokens += req.num_tokens
        self.stats.hits_tokens += computed.num_tokens
        return new

    def cache_full_blocks(self, req: Request) -> None:
        """Register the request's blocks that its computed tokens have filled since the last
        call, so that later requests with the same prefix reuse them."""
        full = req.num_computed // self.block_size
        done = self._num_cached_blocks.get(req.request_id, 0)
        if full <= done:
            return
        if self.enable_caching:
            table = self._tables[req.request_id]
            hashes = req.hashes(self.block_size)
            for j in range(done, full):
                self.block_pool.cache_block(table[j], hashes[j])
        self._num_cached_blocks[req.request_id] = full

    def free(self, req: Request) -> None:
        """Return a request's blocks to the pool, keeping its partly filled last block as a
        reusable tail. Call it before the request's computed count is reset."""
        table = self._tables.pop(req.request_id, [])
        self._num_cached_blocks.pop(req.request_id, None)
        bs = self.block_size
        full = req.num_computed // bs
        if self.enable_caching and req.num_computed % bs and full < len(table):
            parent = req.hashes(bs)[full - 1] if full else req.root_hash
            self.block_pool.cache_tail(table[full], parent, req.all_ids[full * bs : req.num_computed])
        self.block_pool.free(table)
