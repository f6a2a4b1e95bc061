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

# Plain prose on harmless topics that our input guard passes in every order the prompts put them in
# (tests/bench/test_peers_bench.py): a refused prompt would be an error in Switchyard's column alone.
NOTES = (
    "Bread dough rises because yeast turns sugar into gas that is trapped by the gluten.",
    "The old library kept its maps in wide flat drawers to stop the paper from curling.",
    "Tomatoes ripen faster when they are stored next to bananas in a paper bag.",
    "The town council voted to plant a row of oak trees along the main street.",
    "The bakery opens at seven and sells rye loaves, croissants and apple tarts.",
    "A spreadsheet can sort a column of dates from the oldest to the newest in one click.",
    "The museum added a new room for Roman coins, pottery and glass beads.",
    "Honeybees visit clover, lavender and apple blossoms during the spring months.",
    "A good pot of soup starts with onions, carrots and celery cooked slowly in butter.",
    "The garden has three raised beds for beans, lettuce and strawberries.",
    "A simple budget lists income first and then rent, food, travel and savings.",
    "The chess club meets every Monday evening at the public library.",
    "Solar panels on the roof supply most of the power the office uses in summer.",
    "The recipe asks for two cups of flour, one egg and a spoon of sugar.",
    "A lighthouse keeper once trimmed the wick every few hours so the light never failed.",
    "Clouds form when warm air cools as it rises and its water vapour condenses on dust.",
    "The bus timetable changes in September when the schools open again.",
    "Knitting a scarf takes about two balls of wool and a pair of thick needles.",
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
