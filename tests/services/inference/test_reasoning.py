"""Splitting a thinking model's text into thinking and answer as it streams (services/inference/reasoning.py)."""

from __future__ import annotations

import pytest

from switchyard.services.inference.reasoning import ReasoningParser

TEXT = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello! How can I help?"


def run(parser: ReasoningParser, frames: list[str]) -> tuple[str, str, list[str]]:
    """(thinking, answer, the kind of each part in order) of `frames` fed one by one, then finished."""
    parts = [p for f in frames for p in parser.feed(f)] + parser.finish()
    thinking = "".join(t for k, t in parts if k == "thinking")
    answer = "".join(t for k, t in parts if k == "delta")
    return thinking, answer, [k for k, _ in parts]


def cuts(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_delimiters_split_across_frames_anywhere(size: int) -> None:
    thinking, answer, kinds = run(ReasoningParser(), cuts(TEXT, size))
    assert thinking == "The user greets me. I greet back.\n"
    assert answer == "Hello! How can I help?"
    # All the thinking comes before any of the answer.
    assert kinds == sorted(kinds, key=lambda k: k == "delta")


def test_nothing_that_could_be_a_delimiter_is_released_early_and_nothing_else_waits() -> None:
    p = ReasoningParser()
    assert p.feed("<thi") == []  # could still be the open tag
    assert p.feed("nk>Let me see") == [("thinking", "Let me see")]
    assert p.feed(" </th") == [("thinking", " ")]  # the possible close tag waits, the space does not
    assert p.feed("ink>") == []
    assert p.feed("\n\nYes.") == [("delta", "Yes.")]
    # A tag-like text that is not the close tag is thinking after all.
    p = ReasoningParser()
    assert p.feed("<think>a </thi") == [("thinking", "a ")]
    assert p.feed("ng>") == [("thinking", "</thing>")]
    assert p.feed(" </tho") == [("thinking", " </tho")]  # never the close tag: released at once


def test_no_end_tag_is_all_thinking() -> None:
    thinking, answer, _ = run(ReasoningParser(), cuts("<think>I keep thinking and never stop </thi", 4))
    assert (thinking, answer) == ("I keep thinking and never stop </thi", "")


def test_a_model_that_does_not_open_its_thinking_is_answering() -> None:
    thinking, answer, _ = run(ReasoningParser(), cuts("  Hello there, <think> is just text here.", 3))
    assert (thinking, answer) == ("", "Hello there, <think> is just text here.")
    # An answer shorter than the open tag, that looked like its start until the end.
    assert run(ReasoningParser(), ["<thi"])[:2] == ("", "<thi")


def test_a_prompt_that_opened_the_thinking_starts_inside_it() -> None:
    """DeepSeek-R1's template ends its generation prompt with `<think>\\n`: the output has only the close."""
    thinking, answer, _ = run(ReasoningParser(started=True), cuts("Two plus two is four.</think>\n\n4", 4))
    assert (thinking, answer) == ("Two plus two is four.", "4")


def test_other_delimiters() -> None:
    p = ReasoningParser(open="<|begin_of_thought|>", close="<|end_of_thought|>")
    thinking, answer, _ = run(p, cuts("<|begin_of_thought|>hmm<|end_of_thought|>ok", 3))
    assert (thinking, answer) == ("hmm", "ok")
    assert p.thought and not p.thinking
