import random

import pytest

from switchyard.libs.safety import S9, InputGuard, StreamGuard, redact
from switchyard.libs.safety.taxonomy import EMBEDDING, Verdict

SAMPLES = [
    "Sure! Write to john.smith@example.com or call +1 (555) 123-4567. Thanks.",
    "Reach firstname.lastname.department@subdomain.company-example.com, or 555 123 4567 ok",
    "Card 4111 1111 1111 1111 is valid; 4111 1111 1111 1112 is not. SSN 123-45-6789.\n",
    "Key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKC abc\n-----END RSA PRIVATE KEY-----\ndone.",
    "password: hunter22! and sk-proj-abcdefghijklmnopqrstuvwxyz123 end",
    "No personal data here, just a long answer about sourdough starters and hydration levels. " * 3,
]
SENSITIVE = ["john.smith", "@", "555", "4111 1111 1111 1111", "123-45-6789", "MIIE", "hunter", "sk-proj"]


def stream(text: str, guard: StreamGuard, rng: random.Random) -> list[str]:
    pieces, i = [], 0
    while i < len(text):
        k = rng.randint(1, 3)
        pieces.append(guard.feed(text[i : i + k]).text)
        i += k
    pieces.append(guard.finish().text)
    return pieces


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("holdback", [0, 8, 48])
def test_tiny_deltas_never_leak_and_match_redact(text: str, holdback: int) -> None:
    rng = random.Random(hash((text, holdback)) & 0xFFFF)
    for _ in range(30):
        g = StreamGuard(holdback_chars=holdback)
        pieces = stream(text, g, rng)
        for piece in pieces:
            for s in SENSITIVE:
                assert s not in piece or s not in text or s in redact(text)[0]
        assert "".join(pieces) == redact(text)[0]
        assert g.released_text == redact(text)[0]
        assert g.full_text == text


def test_one_char_at_a_time_email() -> None:
    g = StreamGuard()
    text = "Contact me at a.very.long.address@example-company.com please."
    out = [g.feed(c).text for c in text]
    out.append(g.finish().text)
    assert all("@" not in p and "example" not in p for p in out)
    assert "".join(out) == "Contact me at [email redacted] please."


def test_holds_back_a_window_then_releases() -> None:
    g = StreamGuard(holdback_chars=48)
    first = g.feed("Hello there, this is a reasonably long answer without a boundary")
    assert first.text and len(g.full_text) - len(first.text) <= 48 + 10
    assert g.finish().text


def test_releases_at_sentence_boundary() -> None:
    g = StreamGuard(holdback_chars=48)
    assert g.feed("Short. ").text == "Short. "


def test_redactions_reported_with_original_offsets() -> None:
    g = StreamGuard()
    text = "Mail bob@example.org now. "
    rel = [g.feed(text), g.finish()]
    spans = [r for x in rel for r in x.redactions]
    assert [(s.kind, text[s.start : s.end]) for s in spans] == [("email", "bob@example.org")]


def test_blocked_category_stops_the_stream() -> None:
    g = StreamGuard(holdback_chars=16)
    r1 = g.feed("Here is the plan. ")
    assert r1.text == "Here is the plan. " and r1.blocked is None
    r2 = g.feed("Step one: how to make a pipe bomb with household items. ")
    assert r2.blocked is not None and r2.blocked.category == S9 and r2.text == ""
    assert "bomb" not in g.released_text
    r3 = g.feed("more text")
    assert r3.blocked is not None and r3.text == ""
    assert g.finish().text == ""


def test_record_verdicts_use_the_whole_answer() -> None:
    g = StreamGuard(guard=InputGuard(use_embeddings=False))
    g.feed("I want to kill myself, ")
    g.feed("he wrote.")
    assert g.record_verdicts() and g.record_verdicts()[0].category == "S11"


def test_record_verdicts_join_the_whole_answers_rules_and_its_sentences_verdicts() -> None:
    g = StreamGuard(guard=InputGuard(use_embeddings=False), judge_inline=False)
    g.feed("I want to kill myself, ")
    g.feed("he wrote.")
    g.finish()
    learned = Verdict("S1", 0.7, "flag", EMBEDDING, "v1")
    g.flags.append(learned)
    got = g.record_verdicts()
    assert [v.category for v in got] == ["S11", "S1"]  # worst first, one per category
    assert got[1] is learned
