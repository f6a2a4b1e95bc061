"""The peers benchmark's prompts: a nonce first (every server caches prefixes), then a question and notes
sized with our tokenizer to the workload's prompt length."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from bench.engine_bench import QUESTIONS


@dataclass(frozen=True)
class Workload:
    name: str
    prompt_tokens: int  # tokens of the user message as our tokenizer counts it (the template adds its own)
    out_tokens: int


WORKLOADS = {
    "prefill": Workload("prefill", 170, 64),
    "decode": Workload("decode", 35, 128),
}

# Plain prose on harmless topics, so that no safety stage in any pipeline refuses it.
NOTES = (
    "The river rises in the hills and runs south through farmland before it reaches the sea.",
    "Most bicycles have a chain that carries the force of the pedals to the rear wheel.",
    "Bread dough rises because yeast turns sugar into gas that is trapped by the gluten.",
    "A lighthouse keeper once trimmed the wick every few hours so the light never failed.",
    "Regular walks improve sleep, mood and the strength of the heart over a few months.",
    "Clouds form when warm air cools as it rises and its water vapour condenses on dust.",
    "The old library kept its maps in wide flat drawers to stop the paper from curling.",
    "Tomatoes ripen faster when they are stored next to bananas in a paper bag.",
    "The town council voted to plant a row of oak trees along the main street.",
    "A violin sounds warmer when its strings are played near the middle of the fingerboard.",
)


def nonce_head(nonce: str, index: int) -> str:
    return f"[{nonce}-{index}] "


def build_prompt(nonce: str, index: int, target: int, count: Callable[[str], int]) -> str:
    """The nonce, a question, then as many words of notes as keep the message's token count (`count`) at
    `target` or just under; the notes start at a different sentence for each index."""
    head = nonce_head(nonce, index) + QUESTIONS[index % len(QUESTIONS)]
    start = index % len(NOTES)
    words: list[str] = []
    while len(words) < 2 * target:  # a word is at least one token: twice the target is always enough
        words += " ".join(NOTES[(start + k) % len(NOTES)] for k in range(len(NOTES))).split()

    def text(k: int) -> str:
        return head + (" Notes: " + " ".join(words[:k]) if k else "")

    lo, hi = 0, len(words)  # the largest k whose text fits: the count grows with k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text(mid)) <= target:
            lo = mid
        else:
            hi = mid - 1
    return text(lo)


@functools.cache
def tokenizer_count() -> Callable[[str], int]:
    """Our tokenizer's count of a message (the bundled model's, as every server here runs it)."""
    from switchyard.libs.tokenizer import TokenizerSettings, load_tokenizer

    return load_tokenizer(TokenizerSettings().resolved_model_path()).count


def rendered_tokens(text: str) -> int:
    """The prompt's tokens once the chat template wraps the message (what a server actually prefills)."""
    from bench.pipeline_bench import _tokenizer, render_prompt

    return int(_tokenizer().count(render_prompt(text)))
