"""The grammar limits' structural checks (issue 28, items 2, 3 and 7): each attack is refused by name,
in time linear in its size, while ordinary and recursive schemas pass."""

from __future__ import annotations

import time
from typing import Any

import pytest

from switchyard.libs.constraints import (
    GrammarLimitError,
    GrammarLimits,
    check_choices,
    check_regex,
    check_schema,
    check_tool_schemas,
)

LIMITS = GrammarLimits.model_construct()


def ref_chain(n: int, *, nested: bool = False) -> dict[str, Any]:
    """`$defs` d0 -> d1 -> ... -> dn, each a bare `$ref` (flat) or an object whose property refers on."""

    def hop(i: int) -> dict[str, Any]:
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        return {"type": "object", "properties": {"x": ref}} if nested else ref

    defs = {f"d{i}": hop(i) for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def refused(schema: Any, match: str, limits: GrammarLimits = LIMITS) -> None:
    with pytest.raises(GrammarLimitError, match=match):
        check_schema(schema, limits, "response_format.json_schema")


def test_a_flat_ref_chain_is_refused_by_its_depth_naming_the_setting() -> None:
    refused(ref_chain(4500), "SWITCHYARD_GRAMMAR_MAX_SCHEMA_BYTES")  # issue 28's 430 KB: over the size first
    refused(
        ref_chain(200), r"response_format\.json_schema: \$ref chain deeper than 32 .*SWITCHYARD_GRAMMAR_MAX_REF_DEPTH"
    )
    refused(ref_chain(200, nested=True), "SWITCHYARD_GRAMMAR_MAX_(REF_)?DEPTH")
    # Under a size limit raised out of the way, the walk still stops at the depth, not after 4,500 hops.
    roomy = LIMITS.model_copy(update={"max_schema_bytes": 10**7})
    t0 = time.process_time()
    refused(ref_chain(4500), "SWITCHYARD_GRAMMAR_MAX_REF_DEPTH", roomy)
    refused(ref_chain(4500, nested=True), "SWITCHYARD_GRAMMAR_MAX_(REF_)?DEPTH", roomy)
    assert time.process_time() - t0 < 5


def test_nesting_is_measured_after_refs_resolve() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"x": deep}}
    check_schema(deep, LIMITS)  # 41 objects: `properties` maps names to schemas, it is no level of its own
    refused(
        {"$ref": "#/$defs/a", "$defs": {"a": deep}},
        "SWITCHYARD_GRAMMAR_MAX_DEPTH",
        LIMITS.model_copy(update={"max_depth": 30}),
    )


def test_pure_ref_cycles_are_refused_and_recursive_schemas_pass() -> None:
    refused({"$ref": "#"}, "circular \\$ref chain with no schema content")
    refused({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "circular")
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    check_schema(tree, LIMITS)
    check_schema(ref_chain(20), LIMITS)


def test_a_dag_of_refs_is_measured_once_per_schema_not_per_path() -> None:
    n = 30  # 2**30 paths through the refs
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(n)
    }
    defs[f"d{n}"] = {"type": "string"}
    t0 = time.process_time()
    check_schema({"$ref": "#/$defs/d0", "$defs": defs}, LIMITS)
    assert time.process_time() - t0 < 5


def test_unresolvable_and_remote_refs_are_refused() -> None:
    refused({"$ref": "#/$defs/missing"}, "does not resolve")
    refused({"$ref": "https://example.com/schema.json"}, "not local")


def test_size_enums_and_literals_are_bounded() -> None:
    refused({"enum": list(range(10_000))}, "an enum of 10000 values.*SWITCHYARD_GRAMMAR_MAX_ENUM_VALUES")
    refused({"enum": ["x" * 1000] * 20}, "SWITCHYARD_GRAMMAR_MAX_LITERAL_BYTES")
    refused({"description": "x" * 70_000}, "over 65536 .*SWITCHYARD_GRAMMAR_MAX_SCHEMA_BYTES")
    # Literals count once per schema object, however many refs lead there.
    shared = {"enum": [f"v{i}" for i in range(500)]}
    check_schema(
        {"type": "object", "properties": {f"p{i}": {"$ref": "#/$defs/e"} for i in range(50)}, "$defs": {"e": shared}},
        LIMITS,
    )


def test_choices_are_bounded_by_count_and_bytes() -> None:
    check_choices(["yes", "no"], LIMITS)
    with pytest.raises(GrammarLimitError, match="SWITCHYARD_GRAMMAR_MAX_LITERAL_BYTES"):
        check_choices(["x" * 3000] * 256, LIMITS, "structured_outputs.choice")
    with pytest.raises(GrammarLimitError, match="SWITCHYARD_GRAMMAR_MAX_ENUM_VALUES"):
        check_choices([str(i) for i in range(2000)], LIMITS)


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ("(" * 3000 + ")" * 3000, "SWITCHYARD_GRAMMAR_MAX_REGEX_CHARS"),
        ("(" * 40 + "a" + ")" * 40, "groups nest deeper than 32.*SWITCHYARD_GRAMMAR_MAX_REGEX_DEPTH"),
        ("(a" * 5, "5 unclosed"),
        ("a)b", "unbalanced '\\)' at position 1"),
        ("[a-z", "unterminated character class"),
        ("ab\\", "lone backslash"),
    ],
)
def test_bad_regexes_are_refused_by_name(pattern: str, match: str) -> None:
    with pytest.raises(GrammarLimitError, match=match):
        check_regex(pattern, LIMITS)


@pytest.mark.parametrize("pattern", [r"20\d\d-[01]\d", r"[)(]+", r"[]x]", r"\(\)", r"(a|b)*c", r"[^]]"])
def test_good_regexes_pass(pattern: str) -> None:
    check_regex(pattern, LIMITS)


def test_patterns_inside_schemas_and_tool_schemas_are_checked() -> None:
    refused({"type": "string", "pattern": "a)"}, "pattern: unbalanced")
    with pytest.raises(GrammarLimitError, match=r"tools\[1\]\.parameters: circular"):
        check_tool_schemas(
            [("tools[0].parameters", {"type": "object"}), ("tools[1].parameters", {"$ref": "#"})], LIMITS
        )
    big = {"type": "object", "description": "x" * 40_000}
    with pytest.raises(GrammarLimitError, match=r"tools: parameter schemas of .* in all"):
        check_tool_schemas([("a", big), ("b", big)], LIMITS)
