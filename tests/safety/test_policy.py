from switchyard.libs.safety import (
    ALLOW,
    BLOCK,
    FLAG,
    HARM_CATEGORIES,
    INVISIBLE_TEXT,
    S1,
    S6,
    S11,
    SECRETS,
    SafetyPolicy,
    Verdict,
    worst_action,
)


def test_defaults() -> None:
    p = SafetyPolicy()
    t = p.threshold(S6)
    assert p.action(S6, 0.99, "user") == BLOCK
    assert p.action(S6, (t.flag_at + (t.block_at or 1)) / 2, "user") == FLAG
    assert p.action(S6, 0.01, "user") == ALLOW
    assert p.action(INVISIBLE_TEXT, 1.0, "user") == FLAG


def test_untrusted_sources_never_block() -> None:
    p = SafetyPolicy()
    for source in ("file", "tool"):
        assert p.action(S6, 1.0, source) == FLAG
        assert p.action(SECRETS, 1.0, source) == FLAG


def test_model_output_only_judged_on_harm() -> None:
    p = SafetyPolicy()
    assert p.action(SECRETS, 1.0, "model") == ALLOW
    assert p.action(S1, 1.0, "model") == BLOCK  # see answer_thresholds


def test_tenant_overrides_merge_with_defaults() -> None:
    p = SafetyPolicy.model_validate({"thresholds": {"S6": {"block_at": None}}, "disabled": ["S8"]})
    assert p.action(S6, 1.0, "user") == FLAG
    assert p.action("S8", 1.0, "user") == ALLOW
    assert p.action("S1", 1.0, "user") == BLOCK
    assert p.threshold(S6).flag_at == SafetyPolicy().threshold(S6).flag_at


def test_worst_action() -> None:
    v = [Verdict("S1", 0.6, FLAG, "embedding", "v"), Verdict("S2", 0.9, BLOCK, "embedding", "v")]
    assert worst_action(v) == BLOCK
    assert worst_action(v[:1]) == FLAG
    assert worst_action([]) == ALLOW


def test_model_output_needs_near_certain_score_to_block() -> None:
    p = SafetyPolicy()
    for c in HARM_CATEGORIES:
        # Past the request bar but short of the answer bar: a request is blocked, an answer only flagged.
        request, answer = p.threshold(c).block_at or 1.0, p.threshold(c, "model").block_at or 1.0
        assert request < answer, c
        between = (request + answer) / 2
        assert p.action(c, between, "model") == FLAG
        assert p.action(c, between, "user") == BLOCK
        assert p.action(c, 1.0, "model") == (FLAG if c == S6 else BLOCK)


def test_specialized_advice_never_stops_an_answer_by_default() -> None:
    # Dosing and legal steps in an answer score like requests for them (docs/safety.md).
    assert SafetyPolicy().threshold(S6, "model").block_at is None
    assert SafetyPolicy().action(S6, 1.0, "user") == BLOCK


def test_answers_have_their_own_thresholds() -> None:
    p = SafetyPolicy()
    assert set(p.answer_thresholds) == set(HARM_CATEGORIES)
    for c in HARM_CATEGORIES:
        assert p.threshold(c, "model") == p.answer_thresholds[c]
        assert p.threshold(c, "user") == p.thresholds[c]
        answer_block = p.threshold(c, "model").block_at
        assert answer_block is None or answer_block > (p.threshold(c, "user").block_at or 0)


def test_answer_overrides_merge_and_leave_requests_alone() -> None:
    p = SafetyPolicy.model_validate({"answer_thresholds": {"S11": {"block_at": None}}})
    assert p.action(S11, 1.0, "model") == FLAG
    assert p.action(S11, 1.0, "user") == BLOCK
    assert p.threshold(S11, "model").flag_at == SafetyPolicy().threshold(S11, "model").flag_at
    assert p.threshold(S6, "model") == SafetyPolicy().threshold(S6, "model")
