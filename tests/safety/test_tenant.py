"""A tenant's stored overrides turned into the policy the guards apply."""

from __future__ import annotations

from switchyard.libs.safety import ALL_CATEGORIES, BLOCK, FLAG, S1, S6, S14, SECRETS, InputGuard, SafetyPolicy
from switchyard.libs.safety.tenant import TenantGuards, tenant_policy
from switchyard.schemas import TenantSafety

OPENAI_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"


def test_no_overrides_is_the_shipped_policy() -> None:
    assert tenant_policy(TenantSafety()) == SafetyPolicy()
    base = SafetyPolicy(untrusted_sources=frozenset({"file"}))
    assert tenant_policy(TenantSafety(), base) is base


def test_an_override_replaces_only_the_fields_it_names() -> None:
    shipped = SafetyPolicy()
    p = tenant_policy(
        TenantSafety.model_validate(
            {"thresholds": {"S6": {"block_at": None}, "S14": {"flag_at": 0.8}, "secrets": {"flag_at": 0.2}}}
        )
    )
    assert p.threshold(S6).flag_at == shipped.threshold(S6).flag_at and p.threshold(S6).block_at is None
    assert p.action(S6, 1.0) == FLAG
    assert p.threshold(S14).flag_at == 0.8 and p.threshold(S14).block_at == shipped.threshold(S14).block_at
    # A score past S14's default block threshold still blocks, whatever the new flag threshold.
    assert p.action(S14, 1.0) == BLOCK
    assert p.threshold(SECRETS).flag_at == 0.2 and p.threshold(SECRETS).block_at == shipped.threshold(SECRETS).block_at
    # Everything else, and the rest of the policy, is untouched.
    assert {c: p.threshold(c) for c in ALL_CATEGORIES if c not in (S6, S14, SECRETS)} == {
        c: shipped.threshold(c) for c in ALL_CATEGORIES if c not in (S6, S14, SECRETS)
    }
    same_rest = p.model_copy(
        update={
            "thresholds": shipped.thresholds,
            "rule_thresholds": shipped.rule_thresholds,
            "technical_flag_only": shipped.technical_flag_only,
        }
    )
    assert same_rest == shipped and p.action(S1, 1.0) == BLOCK


def test_overrides_survive_the_wire() -> None:
    safety = TenantSafety.model_validate({"thresholds": {"S6": {"block_at": None}}})
    again = TenantSafety.model_validate_json(safety.model_dump_json())
    assert tenant_policy(again) == tenant_policy(safety)
    assert tenant_policy(again).threshold(S6).flag_at == SafetyPolicy().threshold(S6).flag_at


def test_guards_per_policy_share_the_base() -> None:
    base = InputGuard(use_embeddings=False)
    guards = TenantGuards(base, size=2)
    assert (
        guards.for_tenant(TenantSafety.model_validate({"strikes": {"enabled": False}, "answer_release": "judged"}))
        is base
    )
    lenient = TenantSafety.model_validate({"thresholds": {"secrets": {"block_at": None}}})
    g = guards.for_tenant(lenient)
    assert g is not base and g is guards.for_tenant(TenantSafety.model_validate(lenient.model_dump()))
    assert [v.action for v in base.check(OPENAI_KEY)] == [BLOCK]
    assert [v.action for v in g.check(OPENAI_KEY)] == [FLAG]
    # Bounded: the least recently used policy's guard is rebuilt when it comes back.
    guards.for_tenant(TenantSafety.model_validate({"thresholds": {"S1": {"flag_at": 0.1}}}))
    guards.for_tenant(TenantSafety.model_validate({"thresholds": {"S2": {"flag_at": 0.1}}}))
    assert guards.for_tenant(lenient) is not g


def test_answer_thresholds_follow_the_tenant() -> None:
    strict = TenantSafety.model_validate({"answer_thresholds": {"S6": {"block_at": 0.96}}})
    policy = tenant_policy(strict)
    assert policy.action("S6", 0.97, "model") == "block"
    assert SafetyPolicy().action("S6", 0.97, "model") == "flag"  # the shipped default never stops S6 answers
    assert policy.action("S6", 0.97, "user") == SafetyPolicy().action("S6", 0.97, "user")


def test_a_tenant_bar_for_a_category_ends_its_softer_judging_of_work() -> None:
    assert S14 in SafetyPolicy().technical_flag_only
    strict = tenant_policy(TenantSafety.model_validate({"thresholds": {"S14": {"block_at": 0.0}}}))
    assert S14 not in strict.technical_flag_only and "prompt_injection" in strict.technical_flag_only
