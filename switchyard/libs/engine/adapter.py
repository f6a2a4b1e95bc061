"""What the engines over other libraries (vllm_engine.py, trtllm.py) share: early cancels, a request's
counts and times, how new tokens become text and a finish reason, and a response format as a guide.

torch-free, like those modules at import: TextStream (switchyard/libs/engine/request.py imports torch) is only named.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from switchyard.libs.constraints import GrammarLimitError, GrammarLimits, check_spec
from switchyard.libs.engine.types import Constraint, ConstraintError, StreamChunk, TokenLogprobs, Usage

if TYPE_CHECKING:
    from switchyard.libs.engine.request import TextStream

MAX_EARLY_CANCELS = 1024


class EarlyCancels:
    """Request ids cancelled from any thread, possibly before generate() has submitted them; the newest
    MAX_EARLY_CANCELS are kept until their request takes or forgets them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, None] = {}

    def add(self, request_id: str) -> None:
        with self._lock:
            self._ids[request_id] = None
            while len(self._ids) > MAX_EARLY_CANCELS:
                self._ids.pop(next(iter(self._ids)))

    def take(self, request_id: str) -> bool:
        """Whether the request was cancelled; the cancel is used up."""
        with self._lock:
            return self._ids.pop(request_id, 0) is None

    def discard(self, request_id: str) -> None:
        with self._lock:
            self._ids.pop(request_id, None)

    def __contains__(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._ids


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[str], None], request_id: str) -> None:
    """fn(request_id) on the engine's loop: at once when called there, else handed over thread-safely
    (the libraries' clients are not thread-safe); nothing when the engine has no running loop."""
    if loop is None or loop.is_closed():
        return
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if here is loop:
        fn(request_id)
    else:
        loop.call_soon_threadsafe(fn, request_id)


def early_end(request_id: str, ids: list[int], servable: bool, cancels: EarlyCancels) -> StreamChunk | None:
    """The only chunk of a request that ends before it is submitted: one the engine cannot serve, or
    one cancelled first. None when the request goes ahead."""
    if not servable:
        return StreamChunk(request_id, "", [], finished=True, finish_reason="error")
    if cancels.take(request_id):
        return StreamChunk(request_id, "", [], True, "cancelled", Usage(len(ids), 0, 0, None, None))
    return None


def push_tokens(text: TextStream, new_ids: list[int], finish_reason: str | None) -> tuple[str, str | None]:
    """New tokens through our stop strings: the text they add, and the request's finish reason when it
    ends here (the library finished it, or one of our stop strings was seen), else None."""
    if finish_reason is not None:
        # A natural end flushes held-back text; a cancelled or failed one has no more to say.
        delta = text.push(new_ids, final=finish_reason in ("stop", "length"))
        return delta, "stop" if text.stopped else finish_reason
    delta = text.push(new_ids)
    return delta, "stop" if text.stopped else None


def check_constraint(c: Constraint | None, limits: GrammarLimits | None) -> None:
    """The grammar limits, checked again by every engine before it compiles a constraint (defence in
    depth: the gateway is not an engine's only caller). ConstraintError names the limit."""
    if c is None:
        return
    try:
        check_spec(c.kind, c.spec, limits or GrammarLimits.model_construct())
    except GrammarLimitError as e:
        raise ConstraintError(str(e)) from e


def guide_args(c: Constraint | None) -> dict[str, Any] | None:
    """A response format as the keyword arguments of both libraries' guides (vLLM's StructuredOutputsParams,
    the LLM API's GuidedDecodingParams); a choice comes as `choice`, the list decoded. None: no guide.

    A tool constraint is not passed: its grammar starts inside the forced opening the prompt already ends
    with, which one guide cannot say; that opening alone is what a forced call gets on these engines."""
    if c is None or c.kind == "tools":
        return None
    if c.kind == "json_object":
        return {"json_object": True}
    if c.kind == "json_schema":
        return {"json": c.spec}
    if c.kind == "regex":
        return {"regex": c.spec}
    return {"choice": json.loads(c.spec)}


class RequestStats:
    """One request's counts and times (monotonic, where our tokens arrive)."""

    def __init__(self, prompt: int) -> None:
        self.prompt = prompt
        self.t0 = time.monotonic()
        self.first: float | None = None
        self.last: float | None = None
        self.n = 0
        self.cached = 0
        self.released = False

    def release(self) -> bool:
        """True the first time only: a request is forgotten once."""
        if self.released:
            return False
        self.released = True
        return True

    def tokens(self, new_ids: list[int]) -> None:
        if new_ids:
            self.last = time.monotonic()
            self.first = self.first or self.last
            self.n += len(new_ids)

    def timings(self) -> tuple[float | None, float | None]:
        """Time to first token and time per output token after it."""
        ttft = None if self.first is None else self.first - self.t0
        tpot = (self.last - self.first) / (self.n - 1) if self.n > 1 and self.first and self.last else None
        return ttft, tpot

    def usage(self) -> Usage:
        return Usage(self.prompt, self.cached, self.n, *self.timings())

    def final(
        self, request_id: str, text: str, ids: list[int], reason: str, lps: list[TokenLogprobs] | None = None
    ) -> StreamChunk:
        return StreamChunk(
            request_id, text, ids, True, reason, self.usage(), token_at=self.last if ids else None, logprobs=lps
        )
