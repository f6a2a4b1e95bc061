"""The tenant safety policy on the wire: validated strictly, and overrides keep "left out" apart from "null"."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from switchyard.libs.safety import ALL_CATEGORIES
from switchyard.schemas import SafetyCategory, TenantSafety, ThresholdOverride, Work


def test_categories_match_the_taxonomy() -> None:
    assert typing.get_args(SafetyCategory) == ALL_CATEGORIES


def test_defaults() -> None:
    d = TenantSafety()
    assert (d.answer_release, d.flag_is_strike, d.thresholds) == ("stream", False, {})
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
        {"flag_is_strike": True, "extra": 1},
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
