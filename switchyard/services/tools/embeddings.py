"""`subjects.EMBEDDINGS`: sentence embeddings for `POST /v1/embeddings`, from the encoder this service
already hosts for planning and document search (no second copy of the model anywhere).

The vectors come out of the planner's pass batcher: one niced thread, and an embeddings request with
many inputs shares each pass round-robin with planning, so a chat's plan waits at most one pass."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from switchyard.libs.bus import BusError
from switchyard.schemas import EmbedReply, EmbedRequest, ErrorCode
from switchyard.schemas.embeddings import EMBEDDING_DIM, EMBEDDING_MAX_TOKENS, EMBEDDING_MODEL

EmbedMany = Callable[[list[str]], Awaitable[list[np.ndarray]]]


class Counter(Protocol):
    def count_tokens(self, texts: list[str]) -> list[int]: ...


class Embeddings:
    def __init__(self, counter: Counter, embed_many: EmbedMany):
        self.counter = counter
        self.embed_many = embed_many

    async def handle(self, req: EmbedRequest) -> EmbedReply:
        counts = await asyncio.to_thread(self.counter.count_tokens, req.texts)
        for i, n in enumerate(counts):
            if n > EMBEDDING_MAX_TOKENS:
                raise BusError(
                    ErrorCode.bad_request,
                    f"input[{i}] is {n} tokens; {EMBEDDING_MODEL} reads at most {EMBEDDING_MAX_TOKENS} per input",
                )
        rows = await self.embed_many(req.texts)
        if len(rows) != len(req.texts):  # the planner lost its encoder (it then returns nothing)
            raise BusError(ErrorCode.unavailable, "the embedding model is not available")
        vectors = np.asarray(np.stack(rows), dtype="<f4")
        if vectors.shape[1] != EMBEDDING_DIM:
            raise BusError(ErrorCode.internal, f"encoder width {vectors.shape[1]} is not {EMBEDDING_DIM}")
        return EmbedReply(
            model=EMBEDDING_MODEL,
            dim=EMBEDDING_DIM,
            vectors=base64.b64encode(vectors.tobytes()).decode("ascii"),
            tokens=counts,
        )
