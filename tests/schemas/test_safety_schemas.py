"""The tenant safety policy on the wire: validated strictly, and overrides keep "left out" apart from "null"."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from switchyard.libs.safety import ALL_CATEGORIES
from switchyard.schemas import SafetyCategory, StrikePolicy, TenantSafety, ThresholdOverride, Work


def test_categories_match_the_taxonomy() -> None:
    assert typing.get_args(SafetyCategory) == ALL_CATEGORIES


def test_defaults() -> None:
    d = TenantSafety()
    assert (d.answer_release, d.strikes, d.thresholds) == ("stream", StrikePolicy(), {})
    assert d.strikes.enabled and d.strikes.threshold is None and d.strikes.window_s is None
    assert Work(rid="r", tenant="t", user="u", key_id="k", text="x").safety == d


@pytest.mark.parametrize(
    "bad",
    [
        {"answer_release": "hold"},
        {"thresholds": {"S99": {"flag_at": 0.5}}},
        {"thresholds": {"S1": {"flag_at": 1.5}}},
        {"thresholds": {"S1": {"flag_at": None}}},
        {"thresholds": {"S1": {"flag_at": 0.9, "block_at": 0.5}}},
        {"thresholds": {"S1": {"warn_at": 0.5}}},
        {"strikes": {"enabled": True, "extra": 1}},
        # A flag never counts towards a suspension: the old switch is refused on the wire.
        {"flag_is_strike": True},
        {"strikes": {"threshold": 0}},
        {"strikes": {"window_s": 0.5}},
    ],
)
def test_rejects(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        TenantSafety.model_validate(bad)


def test_override_serializes_only_given_fields() -> None:
    never = ThresholdOverride.model_validate({"block_at": None})
    assert never.model_dump() == {"block_at": None}
    assert ThresholdOverride.model_validate({"flag_at": 0.6}).model_dump() == {"flag_at": 0.6}
    w = Work(rid="r", tenant="t", user="u", key_id="k", text="x", safety=TenantSafety(thresholds={"S6": never}))
    again = Work.model_validate_json(w.model_dump_json())
    assert again.safety.thresholds["S6"].model_fields_set == {"block_at"}


def test_strike_policy_serializes_only_what_was_set() -> None:
    assert TenantSafety().model_dump()["strikes"] == {"enabled": True}
    set_ = TenantSafety.model_validate({"strikes": {"threshold": 3, "window_s": 60}})
    assert set_.model_dump()["strikes"] == {"enabled": True, "threshold": 3, "window_s": 60.0}
    assert TenantSafety.model_validate({"strikes": {"enabled": False}}).strikes.enabled is False


def test_a_stored_policy_of_an_older_version_still_loads() -> None:
    old = '{"answer_release": "judged", "flag_is_strike": true, "thresholds": {"S6": {"block_at": null}}}'
    got = TenantSafety.from_stored(old)
    assert got.answer_release == "judged" and got.strikes == StrikePolicy() and got.thresholds["S6"].block_at is None
