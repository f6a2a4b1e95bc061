"""Credential formats (gitleaks/trufflehog-style coverage): each fires on a realistic value and
stays quiet on the placeholders that documentation and questions use."""

import pytest

from switchyard.libs.safety.credentials import find_secrets
from tests.safety.strings import string_constants

# Fake values with the real shape; none of them is a live credential.
POSITIVE = [
    ("AWS access key", "aws_access_key_id = AKIAQ4RT7YU2IO9PLK3M"),
    ("AWS access key", "temporary creds ASIAZ7X2KQ9WMP4RT8LN expire at 5pm"),
    ("AWS secret key", "aws_secret_access_key = Zr8Kq2Wm5Xt9Vb3Nc7Lp1Hs4Jd6Fg0Ty8Ui2Oa5"),
    ("GitHub token", "token ghp_8Kd3LmQ9xR2vT7nW4pY6zA1bC5eF0gH3jI8k"),
    (
        "GitHub token",
        "GITHUB_TOKEN=github_pat_11ABCDE2Q0aZ9xY8wV7uT6_sR5qP4oN3mL2kJ1iH0gF9eD8cB7aZ6yX5wV4uT3sR2qP1oN0mL9kJ8",
    ),
    ("GitHub token", "app installation token ghs_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz2Xc4Vb6N"),
    ("GitHub token", "oauth ghu_Zm4Xn7Bv2Cq9Lw5Ke8Rt1Yp6Ua3Sd0Fg4Hj7"),
    ("GitLab token", "glpat-xY7zW3vU9tS1rQ5pO2nM"),
    ("GitLab token", "runner token glrt-Kq2mB7vL4nP9rT3wY6aC1d"),
    ("GitLab token", "deploy token gldt-9xKq2mB7vL4nP9rT3wY6aZ"),
    ("Slack token", "SLACK_BOT_TOKEN=xoxb-2817364519-8273645192-aBcDeFgHiJkLmNoPqRsTuVwX"),
    ("Slack token", "xapp-1-A04BC5DEF6G-4817264517281-a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0"),
    ("Slack webhook", "post to https://hooks.slack.com/services/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"),
    ("Stripe key", "stripe.api_key = 'sk_live_51HqK8mLw2Nx9Pz4QrT7vY3'"),
    ("Stripe key", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Stripe key", "restricted key rk_live_9Zq2Wx7Ev4Rt1Yu8Io5Pa3Sd"),
    ("Stripe webhook secret", "STRIPE_WEBHOOK_SECRET=whsec_7Hk2Lm9Pq4Rs8Tv1Wx6Yz3Ab5Cd0Ef"),
    ("OpenAI-style API key", 'client = OpenAI(api_key="sk-proj-4fG7hJ2kL9mN3pQ8rS5tV1wX6yZ0aB2c")'),
    ("OpenAI-style API key", "OPENAI_API_KEY=sk-Zx8Kq2mB7vL4nP9rT3wY6aC1dF5gH0jKq2mB7vL4nP9rT3wY"),
    ("Anthropic API key", "sk-ant-api03-Zx8Kq2mB7vL4nP9rT3wY6aC1dF5gH0jK stopped working"),
    ("Google API key", "GOOGLE_API_KEY=AIzaSyD4f8Gh2Jk6Lm0Np4Qr8St2Uv6Wx0Yz3Ab"),
    ("Google OAuth secret", "client_secret GOCSPX-Hk3Lm9Pq2Rs7Tv1Wx5Yz8Ab4Cd6"),
    ("SendGrid API key", "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"),
    ("Twilio API key", "twilio api key SK2b7c9e4f1a3d5b8c0e2f4a6b8c1d3e5f"),
    ("Twilio auth token", "TWILIO_AUTH_TOKEN=9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ("Twilio auth token", "my twilio auth token is 9F8E7D6C5B4A39281706F5E4D3C2B1A0"),
    ("npm token", "//registry.npmjs.org/:_authToken=npm_Kq2mB7vL4nP9rT3wY6aC1dF5gH0jKq2mB7vL"),
    ("PyPI token", "password = pypi-AgEIcHlwaS5vcmcCJDk2ZjQ4NzZkLTZlMzYtNGQ4Zi1iZjA3LWQ1MjBlMGRhYTE4ZQ"),
    ("Hugging Face token", "HF token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 gives 401"),
    (
        "Azure storage key",
        "DefaultEndpointsProtocol=https;AccountName=prodstore;AccountKey=Zr8Kq2Wm5Xt9Vb3Nc7Lp1Hs4Jd6Fg0Ty8Ui2Oa5"
        "Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz2Xc4Vb6Nm8Aq==;EndpointSuffix=core.windows.net",
    ),
    ("DigitalOcean token", "DO_TOKEN=dop_v1_" + "3f9a1c7e5b2d8f4a6c0e9b1d3f5a7c9e2b4d6f8a0c1e3b5d7f9a2c4e6b8d0f1a"),
    ("Shopify token", "X-Shopify-Access-Token: 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"),
    ("Telegram bot token", "bot = Bot('5837261945:AAHk3Lm9Pq2Rs7Tv1Wx5Yz8Ab4Cd6Ef0Gh2')"),
    ("Discord bot token", "client.run('MTA4NzY1NDMyMTA5ODc2NTQzMg.GkT9xQ.Zr8Kq2Wm5Xt9Vb3Nc7Lp1Hs4Jd6Fg0Ty8Ui2O')"),
    # a 17-digit user id: a 23-character first part
    ("Discord bot token", "token NzY1NDMyMTA5ODc2NTQzMjE.GkT9xQ.Zr8Kq2Wm5Xt9Vb3Nc7Lp1Hs4Jd6Fg0Ty8Ui2O"),
    (
        "Discord webhook",
        "https://discord.com/api/webhooks/108765432109876543/Zr8Kq2Wm5Xt9Vb3Nc7Lp1Hs4Jd6Fg0Ty8Ui2Oa5Qw3Er",
    ),
    ("JSON Web Token", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dQw4w9WgXcQ_k8mZ2pL"),
    ("private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x9Kq2mB3vL\n-----END RSA PRIVATE KEY-----"),
    ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\\n-----END"),
    ("private key", "my key is -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkq2mB7vL4nP9rT3wY6aC1dF5"),
    ("private key", "-----BEGIN PRIVATE KEY-----"),
    ("private key", "pasted only the body: MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
    ("connection string password", "DATABASE_URL=postgres://admin:S3cr3tPass!@prod-db.internal:5432/app"),
    ("connection string password", "mysql://root:MyR00tPa55@10.0.0.4:3306/shop"),
    ("connection string password", "mongodb+srv://app:Kq2mB7vL4n@cluster0.ab1cd.mongodb.net/prod"),
    ("connection string password", "REDIS_URL=redis://:Zr8Kq2Wm5Xt9@cache.internal:6379/0"),
    ("connection string password", "amqp://guest:R4bbitPw!@mq.internal:5672/"),
    ("connection string password", "smtp://mailer:Sm7pP4ss@smtp.office365.com:587"),
    ("connection string password", "jdbc:mysql://db.internal:3306/app?user=root&password=Tr0ub4dor3"),
    ("connection string password", "Server=tcp:sql.internal;Database=app;User Id=sa;Password=Yk7!mQ2zR9;"),
    ("database password", "mysql -u root -pMyR00tPa55 -h 10.0.0.4 gives access denied"),
    ("password", "my password: Tr0ub4dor&3"),
    ("password", 'DB_PASSWORD = "s3cr3t-value"'),
    ("password", "PGPASSWORD=Yk7mQ2zR9x psql -h db"),
    ("password", "api_key=4f8a1c3e5b7d9f2a4c6e8b0d1f3a5c7e"),
    ("password", 'secret = "Zr8Kq2Wm5Xt9Vb3Nc7Lp"'),
    ("password", "CLIENT_SECRET: q8ZkT2vN5wX9pL3mR7yB"),
    ("bearer token", 'curl -H "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddcc"'),
]

NEGATIVE = [
    "Set OPENAI_API_KEY=sk-... before running the script.",
    "Replace sk-proj-xxxxxxxxxxxxxxxxxxxxxxxx with your own key.",
    "api_key = '<your key>'",
    "API_KEY=<your-api-key>",
    "aws_access_key_id=AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "token: ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    "STRIPE_KEY=sk_live_xxxxxxxxxxxxxxxxxxxxxxxx",
    "export GITHUB_TOKEN=${GITHUB_TOKEN}",
    "password = getpass()",
    "password: forgotten",
    "I forgot my password: what now?",
    "postgres://user:password@localhost:5432/mydb",
    "redis://localhost:6379/0",
    "postgres://user:${DB_PASSWORD}@db:5432/app",
    "max_tokens=1024",
    "token = os.environ['API_TOKEN']",
    "api_key = 'test'",
    "secret_key_base = Rails.application.credentials.secret_key_base",
    "What does -----BEGIN RSA PRIVATE KEY----- at the top of a file mean?",
    "Stripe publishable keys start with pk_live_ and are safe to embed in web pages.",
    "The meeting is at 12:30, bring the 2024 budget.",
    "sk-ant-api03-... is the format of an Anthropic key",
    "How do I rotate an AWS access key?",
    "what is a JWT and how is eyJ... decoded?",
    "mysql -u root -p",
    "Set the token to your-token-here",
]


@pytest.mark.parametrize(("label", "text"), POSITIVE, ids=[f"{i}-{lab}" for i, (lab, _) in enumerate(POSITIVE)])
def test_credential_formats_fire(label: str, text: str) -> None:
    labels = {s.label for s in find_secrets(text)}
    assert label in labels, labels


@pytest.mark.parametrize("text", NEGATIVE)
def test_placeholders_and_prose_do_not_fire(text: str) -> None:
    assert [(s.label, text[s.start : s.end]) for s in find_secrets(text)] == []


def test_reports_value_not_label() -> None:
    text = "DB_PASSWORD=Yk7mQ2zR9x!"
    (m,) = list(find_secrets(text))
    assert text[m.start : m.end] == "Yk7mQ2zR9x!"


def test_every_credential_the_patterns_find_in_the_tests_passes_the_prefilter() -> None:
    """find_secrets skips text the pre-filter rejects: each match in every test's strings must pass it, on
    its own and in its text, as written and with its letters' case changed, or the skip would hide it."""
    from switchyard.libs.safety.credentials import SECRET_PATTERNS, may_hold_secret

    checked = 0
    for text in string_constants():
        for variant in {text, text.upper(), text.lower(), text.swapcase()}:
            for sp in SECRET_PATTERNS:
                for m in sp.regex.finditer(variant):
                    checked += 1
                    assert may_hold_secret(m.group()), (sp.label, m.group())
                    assert may_hold_secret(variant, m.start()), (sp.label, m.group())
    assert checked > 100


def test_the_prefilter_never_changes_what_find_secrets_finds() -> None:
    """The pre-filter against the patterns run on everything: test strings, their case variants, and text
    generated from pieces of them (credentials cut, glued to labels, prose and other scripts' letters)."""
    import random

    from switchyard.libs.safety.credentials import _scan

    rng = random.Random(7)
    consts = [t for t in string_constants() if t.strip()]
    glue = [
        " ",
        ": ",
        "=",
        " is ",
        "'",
        '"',
        "\n",
        ".",
        "-",
        "_",
        "/",
        "://",
        "@",
        ";",
        "?",
        "&",
        "\u212a",
        "\u017f",
        "\u0131",
    ]
    words = [
        "password",
        "token",
        "key",
        "secret",
        "Bearer",
        "api_key",
        "mysql -u root -p",
        "sshpass -p",
        "the",
        "twilio",
    ]
    texts = [v for t in consts for v in {t, t.upper(), t.lower(), t.swapcase()}]
    for _ in range(3000):
        parts = []
        for _ in range(rng.randint(1, 6)):
            src = rng.choice(consts)
            a = rng.randrange(len(src))
            parts.append(rng.choice([src[a : a + rng.randint(1, 60)], rng.choice(words), rng.choice(glue)]))
        text = "".join(parts)
        texts.append(rng.choice([text, text.swapcase(), text.upper()]))
    found = 0
    for text in texts:
        for pos in {0, len(text) // 3, max(0, len(text) - 20)}:
            full = list(_scan(text, pos))
            assert list(find_secrets(text, pos)) == full, (text, pos)
            found += len(full)
    assert found > 300  # the comparison saw many credentials, not only their absence


def test_a_streams_hint_answers_as_the_prefilter_does() -> None:
    """``SecretHint`` searches only the text it has not searched: on streams cut at random, with the start
    moving on as the stream guard moves it, it says what ``may_hold_secret`` says of the whole window."""
    import random

    from switchyard.libs.safety.credentials import SecretHint, may_hold_secret

    rng = random.Random(11)
    consts = [t for t in string_constants() if t.strip()]
    consts += [t for t in consts if may_hold_secret(t)] * 3  # windows that pass, lose and regain it
    yes = 0
    for _ in range(300):
        text = " ".join(rng.choice(consts) for _ in range(rng.randint(1, 5)))
        text = rng.choice([text, text.swapcase()])
        hint, n, pos = SecretHint(), 0, 0
        while n < len(text):
            n += rng.randint(1, 8)
            pos = max(pos, n - 80 - rng.randint(0, 20))
            expected = may_hold_secret(text[:n], pos)
            assert hint(text[:n], pos) == expected, (text[:n], pos)
            yes += expected
    assert yes > 300


def test_prefix_span_is_the_longest_prefix_match() -> None:
    from re import _parser  # type: ignore[attr-defined]

    from switchyard.libs.safety.credentials import _PREFIXED, PREFIX_SPAN

    assert _parser.parse(_PREFIXED.pattern).getwidth()[1] == PREFIX_SPAN
