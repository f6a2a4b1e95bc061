"""Subject helpers refuse any token a subject could read as a separator, a wildcard or a line end."""

from __future__ import annotations

import re

import pytest

from switchyard.schemas import subjects

BAD = [">", "*", ".", "a.b", "a*", "a>", "a b", "a\tb", "a\nb", "a\rb", "", "a\x00b", "x" * 257]


@pytest.mark.parametrize("bad", BAD)
def test_every_helper_refuses_a_bad_token(bad: str) -> None:
    for helper in (
        subjects.stream_steps_to,
        subjects.chat_events,
        subjects.chat_events_kept,
        subjects.chat_events_of,
        subjects.chat_steps_to,
        subjects.chat_owner,
        subjects.chat_cancel,
    ):
        with pytest.raises(ValueError):
            helper(bad)
    for helper2 in (subjects.infer, subjects.health_of, subjects.stream_steps, subjects.chat_steps):
        with pytest.raises(ValueError):
            helper2("default", bad)
        with pytest.raises(ValueError):
            helper2(bad, "r1")
    for helper1 in (subjects.infer_any, subjects.log_stage, subjects.health):
        with pytest.raises(ValueError):
            helper1(bad)


def test_ids_the_server_makes_are_tokens_and_match_the_edge_pattern() -> None:
    for rid in ("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef-7", "file-0123abcd", "key_01ab"):
        assert re.fullmatch(subjects.ID_PATTERN, rid)
        assert subjects.chat_events(rid) == f"chat.events.{rid}.direct"
        assert subjects.chat_events_of(rid) == f"chat.events.{rid}.*"
        assert subjects.chat_owner(rid) == f"chat.owner.{rid}"
    assert subjects.infer("default", "a1b2c3d4") == "infer.default.a1b2c3d4"


@pytest.mark.parametrize("bad", [*BAD, "x" * 65, "é", "a/b", "%3E"])
def test_the_edge_pattern_refuses_what_is_not_a_server_id(bad: str) -> None:
    assert not re.fullmatch(subjects.ID_PATTERN, bad)


def test_span_names_name_the_variable_part_not_its_value() -> None:
    assert subjects.template(subjects.chat_events("abc123")) == "chat.events.{rid}.direct"
    assert subjects.template(subjects.chat_events_kept("abc123")) == "chat.events.{rid}.kept"
    assert subjects.template(subjects.chat_steps("g1", "s1")) == "chat.steps.{gateway}.{checker}"
    assert subjects.template(subjects.stream_steps("s1", "i1")) == "stream.steps.{checker}.{producer}"
    assert subjects.template(subjects.infer("default", "r7")) == "infer.default.{replica}"
    assert subjects.template(subjects.CONTEXT) == subjects.CONTEXT
