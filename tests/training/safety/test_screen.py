"""The early exit's training: its bar keeps the held-out recall asked for, and the head it fits is the one
the runtime applies."""

from __future__ import annotations

import numpy as np
import pytest

from switchyard.libs.safety.screen import Screen
from training.safety.screen import EXITS, answer_bar, choose_bar, fit_head, head_input, with_sentences


def test_the_bar_keeps_the_asked_recall_of_positives() -> None:
    rng = np.random.default_rng(1)
    scores = rng.normal(size=2000)
    positive = rng.random(2000) < 0.3
    for recall in (0.9, 0.995, 1.0):
        bar = choose_bar(scores, positive, recall, margin=0.0)
        assert (scores[positive] >= bar).mean() >= recall
    # A margin only lowers the bar: more is escalated, never less.
    assert choose_bar(scores, positive, 0.995, 0.5) == pytest.approx(choose_bar(scores, positive, 0.995, 0.0) - 0.5)
    with pytest.raises(ValueError):
        choose_bar(scores, np.zeros(2000, dtype=bool), 0.995, 0.0)


@pytest.mark.parametrize("hidden", [0, 16])
def test_a_fitted_head_separates_what_it_was_taught_as_the_runtime_applies_it(hidden: int) -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(loc=3.0, scale=2.0, size=(3000, 32)).astype(np.float32)
    y = X[:, 5] - X[:, 30] > 0.5
    screen = Screen(fit_head(X, y, hidden), exit_layer=2)
    logits = screen.logits(X)
    assert ((logits > 0) == y).mean() > 0.9


def test_a_head_reads_the_token_embeddings_and_its_exit_layer() -> None:
    dim = 4
    pooled = np.arange(2 * dim * (1 + len(EXITS)), dtype=np.float16).reshape(2, -1)
    for k in EXITS:
        block = 1 + EXITS.index(k)
        want = np.concatenate([pooled[:, :dim], pooled[:, block * dim : (block + 1) * dim]], axis=1)
        np.testing.assert_array_equal(head_input(pooled, k, dim), want)


def test_sentences_are_taught_alone_too() -> None:
    got = with_sentences(["One thing. Another thing!", "Single."])
    assert got == ["One thing. Another thing!", "Single.", "One thing.", "Another thing!"]


def test_the_bar_is_the_lowest_answer_flag_bar() -> None:
    assert 0.0 < answer_bar() <= 0.5
