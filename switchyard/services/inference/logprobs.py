"""The engine's per-token log probabilities in OpenAI's shape: each token's text and its raw bytes."""

from __future__ import annotations

from functools import lru_cache

from switchyard.libs.engine.types import TokenLogprobs
from switchyard.libs.tokenizer import Tokenizer
from switchyard.schemas import TokenLogprob, TopLogprob


@lru_cache(maxsize=1)
def _byte_of() -> dict[str, int]:
    """Byte-level BPE writes each byte as one printable character (GPT-2's table); this reverses it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(tokenizer: Tokenizer, token_id: int) -> bytes:
    """A token's own bytes (a piece of a multi-byte character stays a piece); special tokens as UTF-8."""
    piece = tokenizer.id_to_token(token_id) or ""
    if token_id in tokenizer.special_ids:
        return piece.encode()
    table = _byte_of()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return piece.encode()


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def to_openai(tokenizer: Tokenizer, items: list[TokenLogprobs]) -> list[TokenLogprob]:
    """One entry per token of the answer's text. The end-of-sequence token that closed the answer
    spells none of it, so it has no entry (as OpenAI): the entries' tokens join to the content."""
    out = []
    for t in items:
        if t.token_id in tokenizer.eos_token_ids:
            continue
        raw = token_bytes(tokenizer, t.token_id)
        top = []
        for tid, lp in t.top:
            b = token_bytes(tokenizer, tid)
            top.append(TopLogprob(token=_text(b), logprob=lp, bytes=list(b)))
        out.append(TokenLogprob(token=_text(raw), logprob=t.logprob, bytes=list(raw), top_logprobs=top))
    return out
