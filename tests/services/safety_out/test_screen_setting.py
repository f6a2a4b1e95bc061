"""safety_out's `screen` setting (the classifier's early exit): on by default, off by a switch, and a
harmful answer is still stopped end to end with it on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.safety.guard import calibrated_guard, shared_screen
from switchyard.libs.telemetry import setup_tracing
from switchyard.services.safety_out.settings import SafetyOutSettings
from tests.services.safety_out.checkers import checking_stages
from tests.services.safety_out.test_safety_out_service import Rig, released_then_blocked


def test_the_screen_is_on_by_default_and_follows_its_environment_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_SAFETY_OUT_SCREEN", raising=False)
    assert SafetyOutSettings().screen is True
    monkeypatch.setenv("SWITCHYARD_SAFETY_OUT_SCREEN", "0")
    assert SafetyOutSettings().screen is False
    monkeypatch.setenv("SWITCHYARD_SAFETY_OUT_SCREEN", "1")
    assert SafetyOutSettings().screen is True


def test_off_the_classifier_reads_every_answer_chunk_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    on = calibrated_guard(screen=SafetyOutSettings(screen=True).screen)
    off = calibrated_guard(screen=SafetyOutSettings(screen=False).screen)
    assert off.screen is None and off.screens("model") is None and on.screens("model") is not None
    clf = on.classifier
    screens: list[object] = []
    score = clf.score_pieces
    monkeypatch.setattr(
        clf, "score_pieces", lambda pieces, **kw: screens.append(kw.get("screen")) or score(pieces, **kw)
    )
    texts = [
        "The capital of Australia is Canberra.",
        "Water the tomatoes deeply twice a week in summer.",
        "Here is how to make sarin nerve gas at home: mix the precursors in a sealed container.",
    ]
    with_screen = on.learned_many(texts, source="model")
    without = off.learned_many(texts, source="model")
    assert screens == [on.screen, None]
    # The harmful sentence went on through the whole classifier: the same verdicts both ways.
    assert [(v.category, v.action) for v in with_screen[2]] == [(v.category, v.action) for v in without[2]]
    assert without[2] and with_screen[0] == []


@pytest.fixture(scope="module")
async def screened_rig(nats_server: NatsServer) -> AsyncIterator[Rig]:
    async with checking_stages(nats_server, SafetyOutSettings(screen=True)):
        peer = await Bus.connect(nats_server.url, "inference", "i1", setup_tracing("inference"))
        rig = Rig(peer, {})
        await rig.start_saving()
        yield rig
    await peer.drain()


async def test_with_the_screen_on_a_harmful_answer_is_blocked_and_benign_sentences_exit_early(
    screened_rig: Rig,
) -> None:
    rig = screened_rig
    screen = shared_screen()
    before = screen.screened, screen.escalated
    rid, client, seq = await released_then_blocked(rig, "Sure, I can explain. The capital of Australia is Canberra. ")
    assert rig.saved[rid].turn.answer == client.text
    # The service's passes went through the screen, and it sent on at least the harmful sentence.
    screened, escalated = screen.screened - before[0], screen.escalated - before[1]
    assert screened >= 2 and 1 <= escalated < screened
    await rig.end(rid, seq, "cancelled")
