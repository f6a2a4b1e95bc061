"""Text that must stay text: content in a prompt whose control-token spellings are not control tokens.

A chat template writes its own markup (`<|im_start|>`, `<start_of_turn>`) around content that others
supply: messages of every role, tool specs and results, memory, files, instructions. Tokenizing the
rendered prompt in one pass would turn the same spelling inside content into the real control token, a
turn boundary the content was never meant to open. vLLM's `split_special_tokens` and llama.cpp's
`parse_special=false` tokenize such text as plain text; here content keeps that meaning inside the one
prompt string every stage passes on (records, replays, the tools stage's re-render, the engines):

- `escape` marks each control spelling in a piece of content with `LITERAL` before it (and doubles a
  `LITERAL` the content itself holds), which `render_prompt` does to everything it is handed.
- `unescape` gives back the text as written and where the marked spellings are, for the tokenizer
  (`Tokenizer.encode`), which encodes those as plain text and every unmarked spelling (the template's)
  as its control token.

`LITERAL` is a Unicode noncharacter, meant for exactly this internal use; text without it tokenizes as
it always did.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

LITERAL = "\ufdd0"


class ControlSpellings:
    """The spellings of a vocabulary's control tokens, found leftmost and longest first (as the tokenizer
    matches them). Gemma's vocabulary has thousands of them, so they are found by first character and
    length, not by one alternation."""

    def __init__(self, spellings: Iterable[str]):
        self.spellings = frozenset(s for s in spellings if s and LITERAL not in s)
        lengths: dict[str, set[int]] = {}
        for s in self.spellings:
            lengths.setdefault(s[0], set()).add(len(s))
        self._lengths = {c: sorted(ls, reverse=True) for c, ls in lengths.items()}
        firsts = "".join(sorted(self._lengths)) + LITERAL
        self._candidate = re.compile("[" + re.escape(firsts) + "]")

    def at(self, text: str, pos: int) -> str | None:
        """The longest control spelling that starts at `pos`, if any."""
        for n in self._lengths.get(text[pos], ()) if pos < len(text) else ():
            piece = text[pos : pos + n]
            if piece in self.spellings:
                return piece
        return None

    def candidates(self, text: str) -> Iterator[int]:
        """Positions where a control spelling or a `LITERAL` could start."""
        return (m.start() for m in self._candidate.finditer(text))


def escape(text: str, controls: ControlSpellings) -> str:
    """`text` with every control spelling in it marked as literal text (and its own `LITERAL`s doubled)."""
    out: list[str] = []
    done = 0
    for pos in controls.candidates(text):
        if pos < done:
            continue  # inside a spelling already marked
        if text[pos] == LITERAL:
            out += [text[done:pos], LITERAL, LITERAL]
            done = pos + 1
            continue
        spelling = controls.at(text, pos)
        if spelling is not None:
            out += [text[done:pos], LITERAL, spelling]
            done = pos + len(spelling)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def unescape(text: str, controls: ControlSpellings) -> tuple[str, list[tuple[int, int]]]:
    """The text as written, and the (start, end) of each spelling `escape` marked in it (positions in the
    text returned). A `LITERAL` before anything else stays as it is."""
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    size = 0  # length of what `out` holds
    done = 0
    pos = text.find(LITERAL)
    while pos >= 0:
        chunk = text[done:pos]
        out.append(chunk)
        size += len(chunk)
        nxt = pos + 1
        if text.startswith(LITERAL, nxt):
            out.append(LITERAL)
            size += 1
            done = nxt + 1
        else:
            spelling = controls.at(text, nxt)
            if spelling is None:
                out.append(LITERAL)
                size += 1
                done = nxt
            else:
                out.append(spelling)
                spans.append((size, size + len(spelling)))
                size += len(spelling)
                done = nxt + len(spelling)
        pos = text.find(LITERAL, done)
    out.append(text[done:])
    return "".join(out), spans


def escape_values(value: Any, controls: ControlSpellings) -> Any:
    """Every string in a message or tool spec (nested dicts and lists, keys too) escaped; other values as
    they are. A role is one of a few fixed words, which escaping leaves as they are."""
    if isinstance(value, str):
        return escape(value, controls)
    if isinstance(value, Mapping):
        return {
            (escape(k, controls) if isinstance(k, str) else k): escape_values(v, controls) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [escape_values(v, controls) for v in value]
    return value
