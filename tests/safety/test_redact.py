import pytest

from switchyard.libs.safety import luhn_ok, redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to jane.doe+shop@example.co.uk today", "write to [email redacted] today"),
        ("call (555) 123-4567 or +44 20 7946 0958.", "call [phone redacted] or [phone redacted]."),
        ("my SSN is 123-45-6789", "my SSN is [national id redacted]"),
        ("card 4111 1111 1111 1111 please", "card [card redacted] please"),
        ("amex 3782-822463-10005", "amex [card redacted]"),
        ("token sk-proj-abcdefghijklmnopqrstuvwxyz123456 here", "token [secret redacted] here"),
        ("password: hunter22!", "password: [secret redacted]"),
        ("AKIAQ4RT7YU2IO9PLK3M", "[secret redacted]"),
    ],
)
def test_redacts(text: str, expected: str) -> None:
    assert redact(text)[0] == expected


def test_luhn() -> None:
    assert luhn_ok("4111111111111111")
    assert not luhn_ok("4111111111111112")


def test_luhn_invalid_card_is_not_redacted() -> None:
    text = "card 4111 1111 1111 1112 and 4111111111111112"
    assert redact(text) == (text, [])


@pytest.mark.parametrize(
    "text",
    [
        "order 1234567890123 ships today",  # bare digit runs are ids, not phones or cards
        "released on 2024-01-15, version 1.2.3",
        "password = getpass()",
        "I forgot my password: what now?",
        "kill -9 4242",
        "Use an API key from your dashboard, e.g. API_KEY=<your-key>",
    ],
)
def test_leaves_ordinary_text(text: str) -> None:
    assert redact(text) == (text, [])


def test_offsets_point_into_original() -> None:
    text = "a@b.com and 4111111111111111"
    _, spans = redact(text)
    assert [(s.kind, text[s.start : s.end]) for s in spans] == [
        ("email", "a@b.com"),
        ("card", "4111111111111111"),
    ]


def test_private_key_block() -> None:
    text = "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nbye"
    assert redact(text)[0] == "key:\n[secret redacted]\nbye"


def test_skipping_text_without_digits_or_at_signs_finds_the_same_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import random

    module = importlib.import_module("switchyard.libs.safety.redact")  # the package's `redact` is the function

    rng = random.Random(5)
    pieces = [
        "Call ",
        "+1 (555) 123-4567",
        " or ",
        "bob@example.com",
        " card 4111 1111 1111 1111",
        " SSN ",
        "123-45-6789",
        " ssn: 123456789",
        " AB123456C",
        " GB82WEST12345698765432",
        " plain words ",
        "\u0663\u0664",
        "password: hunter22! ",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(400)]
    found = 0
    for text in texts:
        for pos in range(0, len(text), 3):
            fast = module.find_pii(text, pos)
            with monkeypatch.context() as m:
                m.setattr(module, "_may_hold", lambda *_: (True, True))
                assert fast == module.find_pii(text, pos), (text, pos)
            found += len(fast)
    assert found > 1000
