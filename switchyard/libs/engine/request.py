"""Per-request state: the tokens, the counters, and turning new tokens into safe text deltas.

Each field has one writer. The request itself: its tokens, block hashes, timings and generator
(append_token, hashes). The Scheduler: status, num_computed, cached_tokens, finish_reason. The
NativeEngine: grammar, once, before the request is queued. Block tables are not here: the
KVCacheManager owns them, keyed by request_id.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from switchyard.libs.engine.block_pool import block_hashes_for, salt_root
from switchyard.libs.engine.types import SamplingParams, Usage
from switchyard.libs.tokenizer import IncrementalDecoder, Tokenizer


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    eos_ids: set[int]
    max_len: int  # model context limit: prompt + output never exceeds it
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    # Invariant: the KV of all_ids[:num_computed] is in the blocks of this request's block table.
    num_computed: int = 0
    block_hashes: list[int] = field(default_factory=list)  # of every full block of all_ids (hashes())
    cached_tokens: int = -1  # prompt tokens found in the prefix cache at first admission
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    generator: torch.Generator | None = None
    # An xgrammar matcher when params.constraint is set (switchyard/libs/engine/grammar.py); it has read output_ids.
    grammar: Any = None

    def __post_init__(self) -> None:
        self.all_ids: list[int] = list(self.prompt_ids)
        # The parent key of the first block: the tenant's salt, so cached prefixes are shared only under it.
        self.root_hash = salt_root(self.params.cache_salt)
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed)

    @property
    def num_tokens(self) -> int:
        return len(self.all_ids)

    def hashes(self, block_size: int) -> list[int]:
        self.block_hashes = block_hashes_for(self.all_ids, block_size, self.block_hashes, self.root_hash)
        return self.block_hashes

    def append_token(self, token: int) -> None:
        now = time.monotonic()
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        self.output_ids.append(token)
        self.all_ids.append(token)

    def check_length_or_eos(self) -> str | None:
        if self.output_ids and self.output_ids[-1] in self.eos_ids:
            return "stop"
        if len(self.output_ids) >= self.params.max_tokens or self.num_tokens >= self.max_len:
            return "length"
        return None

    def usage(self) -> Usage:
        ttft = None if self.first_token_at is None else self.first_token_at - self.arrival
        tpot = None
        n = len(self.output_ids)
        if n > 1 and self.first_token_at is not None and self.last_token_at is not None:
            tpot = (self.last_token_at - self.first_token_at) / (n - 1)
        return Usage(
            prompt_tokens=len(self.prompt_ids),
            cached_tokens=max(self.cached_tokens, 0),
            completion_tokens=n,
            ttft_s=ttft,
            tpot_s=tpot,
        )


class TextStream:
    """Detokenizes new tokens and applies stop strings so that a stop string never leaks.

    Text that could be the start of a stop string is held back until it is disambiguated.
    """

    def __init__(self, tokenizer: Tokenizer, stop: list[str], eos_ids: set[int]) -> None:
        self._dec = IncrementalDecoder(tokenizer)
        self._stop = [s for s in stop if s]
        self._eos = eos_ids
        self._pending = ""  # decoded but not yet emitted (possible stop-string prefix)
        self.stopped = False

    def push(self, token_ids: list[int], final: bool = False) -> str:
        if self.stopped:
            return ""
        # EOS tokens carry no visible text.
        visible = [t for t in token_ids if t not in self._eos]
        text = self._pending + self._dec.push(visible)
        if final:
            text += self._dec.flush()
        self._pending = ""
        if not self._stop:
            return text
        cut = -1
        for s in self._stop:
            i = text.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut = i
        if cut != -1:
            self.stopped = True
            return text[:cut]
        if final:
            return text
        hold = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        if hold:
            self._pending = text[-hold:]
            return text[:-hold]
        return text
