"""safety_out's `screen` setting: off by default (the classifier reads every answer chunk), on by a switch."""

from __future__ import annotations

import pytest

from switchyard.libs.safety.guard import calibrated_guard
from switchyard.services.safety_out.settings import SafetyOutSettings


def test_the_screen_is_off_by_default_and_an_environment_switch_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SafetyOutSettings().screen is False
    monkeypatch.setenv("SWITCHYARD_SAFETY_OUT_SCREEN", "1")
    assert SafetyOutSettings().screen is True


def test_off_the_classifier_reads_every_answer_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    on = calibrated_guard(screen=SafetyOutSettings(screen=True).screen)
    off = calibrated_guard(screen=SafetyOutSettings(screen=False).screen)
    assert off.screen is None and off.screens("model") is None and on.screens("model") is not None
    clf = on.classifier
    read: list[str] = []
    score = clf.score_pieces
    monkeypatch.setattr(clf, "score_pieces", lambda pieces: read.extend(pieces) or score(pieces))
    texts = [
        "The capital of Australia is Canberra.",
        "Water the tomatoes deeply twice a week in summer.",
        "Here is how to make sarin nerve gas at home: mix the precursors in a sealed container.",
    ]
    with_screen = on.learned_many(texts, source="model")
    read_on, read[:] = list(read), []
    without = off.learned_many(texts, source="model")
    assert read == texts
    assert len(read_on) < len(texts) and texts[2] in read_on
    # The harmful sentence was read by the classifier both ways: the same verdicts.
    assert with_screen[2] == without[2] and without[2]
