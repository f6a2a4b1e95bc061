"""Turn a growing list of token ids into text deltas that never split a UTF-8 character."""

from __future__ import annotations

from typing import Protocol


class _Decodes(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class IncrementalDecoder:
    """Feed token ids as they arrive; get back only text that is final.

    Byte-level BPE and SentencePiece's byte fallback (<0xXX> tokens) can split one character over
    several tokens, and decoding a partial character yields U+FFFD. We therefore decode a short window (``prefix_offset`` onward) and
    only emit once the tail no longer ends in a replacement char.  Decoding a window rather
    than the whole sequence keeps each call O(window), and starting the window a few tokens
    back keeps merge-dependent spacing right.
    """

    def __init__(self, tokenizer: _Decodes, skip_special: bool = True) -> None:
        self._tok = tokenizer
        self._ids: list[int] = []
        # Invariant: text of ids[prefix_offset:read_offset] has already been emitted.
        self._prefix_offset = 0
        self._read_offset = 0

    @property
    def token_ids(self) -> list[int]:
        return self._ids

    def push(self, new_ids: list[int]) -> str:
        self._ids.extend(new_ids)
        prefix_text = self._tok.decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._tok.decode(self._ids[self._prefix_offset :])
        if full_text.endswith("\ufffd") or len(full_text) <= len(prefix_text):
            # Incomplete character at the end: hold it back until more bytes arrive.
            return ""
        delta = full_text[len(prefix_text) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return delta

    def flush(self) -> str:
        """Whatever is still held back (a sequence that ended mid-character)."""
        prefix_text = self._tok.decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._tok.decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        return full_text[len(prefix_text) :] if len(full_text) > len(prefix_text) else ""
