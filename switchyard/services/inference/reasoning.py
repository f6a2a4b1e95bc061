"""Splitting a thinking model's text into its thinking and its answer, as it streams.

The model writes `<think>` (or the template already wrote it into the prompt), thinks, writes `</think>`,
then answers. The engine's text arrives in frames cut anywhere, so a delimiter may be split across frames:
text that could still be the start of a delimiter is held back until the next frame settles it, and nothing
else is delayed. Like vLLM's reasoning parsers (Qwen3, DeepSeek-R1): a model that opens with something
other than the open tag is answering without thinking; an output that never closes its thinking is all
thinking; what follows the close tag is answer text, passed on unparsed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Part = Literal["thinking", "delta"]
State = Literal["start", "thinking", "answer"]


def _held(text: str, tag: str) -> int:
    """How many trailing characters of `text` are a proper prefix of `tag` (they may yet become it)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


@dataclass
class ReasoningParser:
    open: str = "<think>"
    close: str = "</think>"
    # The prompt already opened the thinking (a template that ends its generation prompt with the open tag).
    started: bool = False
    state: State = field(init=False)
    _buf: str = field(default="", init=False)
    # Whether the current part (thinking, then answer) has begun: the newlines the model writes after a
    # delimiter are layout, not text, and are dropped.
    _begun: bool = field(default=False, init=False)
    _opened: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.state = "thinking" if self.started else "start"

    @property
    def thinking(self) -> bool:
        return self.state != "answer"

    @property
    def holding(self) -> bool:
        """Whether text that may be the start of a delimiter waits for the next frame."""
        return bool(self._buf)

    @property
    def thought(self) -> bool:
        """Whether the output (or the prompt) opened a thinking block, so far."""
        return self.started or self._opened

    def feed(self, text: str) -> list[tuple[Part, str]]:
        """The parts `text` completes, in order; text that may be part of a delimiter waits for the next call."""
        out: list[tuple[Part, str]] = []
        buf = self._buf + text
        self._buf = ""
        while buf:
            if self.state == "start":
                stripped = buf.lstrip()
                if not stripped:
                    self._buf = buf  # only whitespace so far: the model may still open its thinking
                    return out
                if stripped.startswith(self.open):
                    self.state, buf, self._begun, self._opened = "thinking", stripped[len(self.open) :], False, True
                elif self.open.startswith(stripped):
                    self._buf = buf
                    return out
                else:
                    self.state = "answer"
            elif self.state == "thinking":
                at = buf.find(self.close)
                if at >= 0:
                    self._part(out, "thinking", buf[:at])
                    self.state, buf, self._begun = "answer", buf[at + len(self.close) :], False
                    continue
                keep = _held(buf, self.close)
                self._part(out, "thinking", buf[: len(buf) - keep])
                self._buf = buf[len(buf) - keep :]
                return out
            else:
                self._part(out, "delta", buf)
                return out
        return out

    def finish(self) -> list[tuple[Part, str]]:
        """What is still held when the text ends: the thinking's tail, or an answer that only looked like a tag."""
        out: list[tuple[Part, str]] = []
        buf, self._buf = self._buf, ""
        if self.state == "thinking":
            self._part(out, "thinking", buf)
        elif self.state == "start":
            self.state = "answer"
            self._part(out, "delta", buf)
        return out

    def _part(self, out: list[tuple[Part, str]], part: Part, text: str) -> None:
        if not self._begun:
            text = text.lstrip()
            self._begun = bool(text)
        self._emit(out, part, text)

    @staticmethod
    def _emit(out: list[tuple[Part, str]], part: Part, text: str) -> None:
        if not text:
            return
        if out and out[-1][0] == part:
            out[-1] = (part, out[-1][1] + text)
        else:
            out.append((part, text))
