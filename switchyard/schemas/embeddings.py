"""Sentence embeddings served to clients (`POST /v1/embeddings`): the gateway asks the service that
already hosts the sentence encoder (the tools service, whose planner and document search use it) over
`subjects.EMBEDDINGS`, request/reply."""

from __future__ import annotations

from pydantic import BaseModel, Field

# The name clients send and see (OpenAI's `model`), the Hugging Face id it is also known by, and its
# native width: `dimensions` is served only at this size (the encoder has no Matryoshka training).
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
EMBEDDING_MODEL_ALIASES = frozenset({EMBEDDING_MODEL, "sentence-transformers/all-MiniLM-L6-v2"})
EMBEDDING_DIM = 384
# The encoder was trained on inputs up to this many tokens ([CLS] and [SEP] included); longer input is
# refused rather than cut short without a word.
EMBEDDING_MAX_TOKENS = 256


class EmbedRequest(BaseModel):
    tenant: str
    texts: list[str] = Field(min_length=1)


class EmbedReply(BaseModel):
    model: str
    dim: int
    # Every vector, row after row, as little-endian float32 in base64: a third of the bytes of JSON
    # floats, so a large batch stays one bus message; it is also what OpenAI's `encoding_format:
    # "base64"` sends, per row.
    vectors: str
    # Tokens the encoder read for each text.
    tokens: list[int]
