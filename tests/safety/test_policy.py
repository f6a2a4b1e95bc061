from libs.safety import (
    ALLOW,
    BLOCK,
    FLAG,
    INVISIBLE_TEXT,
    S6,
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
    assert p.action(S6, 1.0, "model") == BLOCK  # see model_block_at


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
    assert p.action(S6, 0.7, "model") == FLAG
    assert p.action(S6, 0.95, "model") == BLOCK
