"""Fixed-size KV blocks with reference counts, a free queue and a prefix-cache index.

Ownership: this pool is the only place that changes a block's ref count, hash or free-queue
membership. Its caller, the KVCacheManager (kv_cache_manager.py), holds block tables as plain lists
of block ids.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


class NoFreeBlocksError(RuntimeError):
    """Raised by allocate() when fewer free blocks remain than requested."""


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None  # set once the block is full and registered in the cache
    # A released sequence's partly filled last block: (hash of the full block before it, or
    # None for a first block; the tokens whose KV it holds). See cache_tail.
    tail: tuple[int | None, tuple[int, ...]] | None = None


def hash_block(parent_hash: int | None, token_ids: Sequence[int]) -> int:
    """Chain digest: a block's identity includes everything before it, so equal keys mean an
    equal prefix, not merely equal block contents.

    A cryptographic digest (128-bit blake2b), never Python's ``hash()``: ints hash to themselves,
    so a crafted prompt could make its block's key equal another tenant's and be served that
    tenant's KV on a cache hit (vLLM's CVE-2025-25183)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"\x00" if parent_hash is None else b"\x01" + parent_hash.to_bytes(16, "little"))
    h.update(array("q", token_ids).tobytes())
    return int.from_bytes(h.digest(), "little")


def salt_root(cache_salt: str | None) -> int | None:
    """The parent key of a salted sequence's first block (None: unsalted). The salt enters the chain
    at its root, so every block's key depends on it: equal tokens under different salts never share a
    block, and a first block's cached tail (kept under its parent key) is found only under its own salt
    (vLLM's `cache_salt`, mixed into the first block's hash). Its own domain byte: a salted key never
    equals an unsalted one."""
    if cache_salt is None:
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(b"\x02" + cache_salt.encode())
    return int.from_bytes(h.digest(), "little")


def block_hashes_for(
    token_ids: Sequence[int], block_size: int, start: list[int] | None = None, root: int | None = None
) -> list[int]:
    """Hashes of every full block of token_ids, extending an already computed prefix list; `root` (from
    salt_root) is the first block's parent."""
    hashes = list(start or [])
    for i in range(len(hashes), len(token_ids) // block_size):
        parent = hashes[-1] if hashes else root
        hashes.append(hash_block(parent, token_ids[i * block_size : (i + 1) * block_size]))
    return hashes


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Free blocks in eviction order: the front is evicted first (least recently freed).
        # Invariant: a block is in _free iff its ref_cnt == 0.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}  # block_hash -> block_id
        self._tails: dict[int | None, dict[int, None]] = {}  # parent hash -> tail block ids

    # -- queries -------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def num_evictable(self, ids: Sequence[int]) -> int:
        """How many of these blocks wait in the free queue (no holder): reusing one takes it out,
        leaving one fewer block to allocate."""
        return sum(1 for bid in ids if self.blocks[bid].ref_cnt == 0)

    def lookup(self, hashes: Sequence[int]) -> list[int]:
        """Block ids of the longest run of leading hashes present in the cache."""
        if not self.enable_prefix_caching:
            return []
        found: list[int] = []
        for h in hashes:
            bid = self._cached.get(h)
            if bid is None:
                break
            found.append(bid)
        return found

    def match_tail(self, parent_hash: int | None, token_ids: Sequence[int]) -> tuple[int, int] | None:
        """The cached tail block after `parent_hash` that shares the longest run of leading
        tokens with token_ids, as (block id, tokens shared); None when none shares any."""
        best: tuple[int, int] | None = None
        for bid in self._tails.get(parent_hash, ()):
            tail = self.blocks[bid].tail
            assert tail is not None
            m = 0
            for a, b in zip(tail[1], token_ids, strict=False):
                if a != b:
                    break
                m += 1
            if m and (best is None or m > best[1]):
                best = (bid, m)
        return best

    def free_ids_in_order(self) -> list[int]:
        return list(self._free)

    # -- mutations -----------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise NoFreeBlocksError(f"need {n} blocks, {len(self._free)} free")
        ids: list[int] = []
        for _ in range(n):
            bid, _none = self._free.popitem(last=False)
            blk = self.blocks[bid]
            if blk.tail is not None:
                self._drop_tail(bid)
            if blk.block_hash is not None:
                # Evicting: its contents are about to be overwritten.
                if self._cached.get(blk.block_hash) == bid:
                    del self._cached[blk.block_hash]
                blk.block_hash = None
            blk.ref_cnt = 1
            ids.append(bid)
        return ids

    def touch(self, ids: Sequence[int]) -> None:
        """Take a reference on cached blocks that a new request reuses."""
        for bid in ids:
            blk = self.blocks[bid]
            if blk.ref_cnt == 0:
                del self._free[bid]
            blk.ref_cnt += 1

    def free(self, ids: Sequence[int]) -> None:
        """Drop one reference on each block. Pass a request's blocks in order: the tail is
        queued for eviction first, because a later block is only useful with all before it."""
        for bid in reversed(ids):
            blk = self.blocks[bid]
            assert blk.ref_cnt > 0, f"double free of block {bid}"
            blk.ref_cnt -= 1
            if blk.ref_cnt == 0:
                if blk.block_hash is None and blk.tail is None:
                    # Holds nothing reusable: hand it out before any cached block.
                    self._free[bid] = None
                    self._free.move_to_end(bid, last=False)
                else:
                    self._free[bid] = None

    def cache_block(self, bid: int, block_hash: int) -> None:
        """Register a full block's contents for reuse by later requests."""
        if not self.enable_prefix_caching:
            return
        blk = self.blocks[bid]
        if blk.block_hash is not None:
            return
        if block_hash in self._cached:
            return  # an identical block was computed concurrently; keep the first
        blk.block_hash = block_hash
        self._cached[block_hash] = bid

    def cache_tail(self, bid: int, parent_hash: int | None, token_ids: Sequence[int]) -> None:
        """Keep a sequence's partly filled last block for a later request that continues the
        same tokens (the next turn of a conversation continues the previous answer). Call it
        before the owner frees the block: the block then waits in the free queue like a
        cached one, until it is adopted (adopt_tail) or evicted."""
        if not self.enable_prefix_caching or not token_ids:
            return
        blk = self.blocks[bid]
        # Held (ref 1) means not cached as a tail: allocate and adopt_tail both clear it.
        assert blk.ref_cnt == 1 and blk.block_hash is None and blk.tail is None, (
            "only an unshared, unhashed block is a tail"
        )
        blk.tail = (parent_hash, tuple(token_ids))
        self._tails.setdefault(parent_hash, {})[bid] = None

    def adopt_tail(self, bid: int) -> None:
        """Hand a cached tail block to a new request as its own (ref count 1). Its slots past the
        shared tokens are stale and are overwritten by the adopter's next tokens, so the block
        leaves the cache: nobody else can share a block that its owner keeps writing into."""
        blk = self.blocks[bid]
        assert blk.tail is not None and blk.ref_cnt == 0
        self._drop_tail(bid)
        del self._free[bid]
        blk.ref_cnt = 1

    def _drop_tail(self, bid: int) -> None:
        blk = self.blocks[bid]
        assert blk.tail is not None
        siblings = self._tails[blk.tail[0]]
        del siblings[bid]
        if not siblings:
            del self._tails[blk.tail[0]]
        blk.tail = None

    def reset_prefix_cache(self) -> None:
        for h, bid in list(self._cached.items()):
            if self.blocks[bid].ref_cnt == 0:
                self.blocks[bid].block_hash = None
                del self._cached[h]
        for blk in self.blocks:
            if blk.tail is not None and blk.ref_cnt == 0:
                self._drop_tail(blk.block_id)
