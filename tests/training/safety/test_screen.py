"""The screen's training: its bar keeps the held-out recall asked for, and the features it is fitted on
are the ones the runtime sums."""

from __future__ import annotations

import numpy as np
import pytest

from switchyard.libs.safety.screen import Screen
from training.safety.screen import answer_bar, choose_bar, design, with_sentences


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


def test_training_features_are_the_runtime_features() -> None:
    rng = np.random.default_rng(2)
    screen = Screen(rng.normal(size=30522 + 128).astype(np.float32), -0.5, vocab=30522, buckets=128)
    texts = ["How do I bake sourdough bread?", "x", "Mix the two. Then wait an hour!"]
    fitted = np.asarray(design(screen, texts) @ screen.weights) + screen.bias
    assert fitted == pytest.approx(screen.scores(texts), abs=1e-4)


def test_sentences_are_taught_alone_too() -> None:
    got = with_sentences(["One thing. Another thing!", "Single."])
    assert got == ["One thing. Another thing!", "Single.", "One thing.", "Another thing!"]


def test_the_bar_is_the_lowest_answer_flag_bar() -> None:
    assert 0.0 < answer_bar() <= 0.5
