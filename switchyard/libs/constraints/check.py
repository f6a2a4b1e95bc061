"""Structural checks of a constraint against `GrammarLimits`, in time linear in its size: what a grammar
compiler would expand (every `$ref` followed, every literal, every pattern) is measured before it is
compiled, and a constraint that cannot mean anything (a `$ref` cycle with no schema in it, unbalanced
parentheses) is refused by name instead of decoding to an empty answer."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from switchyard.libs.constraints.limits import GrammarLimits

# Keys whose value maps names to schemas; any other key's dict or list is walked as schema too (a
# generous reading: it may measure more than a compiler would, never less).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas"})
# Keys whose values are data, not schemas: measured as literals or not at all.
_LITERALS = frozenset({"enum", "const"})
_DATA = frozenset({"default", "examples", "required", "$defs", "definitions"})
# What may sit beside a `$ref` without giving the schema content of its own.
_ANNOTATIONS = frozenset({"$ref", "$defs", "definitions", "title", "description", "$comment", "$schema", "$id"})


class GrammarLimitError(ValueError):
    """A constraint over a limit or without meaning; the message names where, what, and the setting."""


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _Budget:
    """What several schemas compiled into one grammar (a request's tools) spend together."""

    def __init__(self) -> None:
        self.literal_bytes = 0


class _SchemaWalk:
    def __init__(self, root: Any, limits: GrammarLimits, where: str, budget: _Budget) -> None:
        self.root, self.limits, self.where, self.budget = root, limits, where, budget
        # id(schema object) -> (objects nested below and including it, $ref hops below it), every `$ref`
        # followed: each object is measured once, so a DAG of refs costs its size, not its paths.
        self.heights: dict[int, tuple[int, int]] = {}
        self.on_path: set[int] = set()

    def fail(self, what: str, field: str | None = None) -> GrammarLimitError:
        suffix = f" (limit {self.limits.env(field)})" if field else ""
        return GrammarLimitError(f"{self.where}: {what}{suffix}")

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise self.fail(f"$ref {ref[:80]!r} is not local to the schema (only '#...' refs are served)")
        pointer = unquote(ref[1:])
        if not pointer:
            return self.root
        if not pointer.startswith("/"):
            raise self.fail(f"$ref {ref[:80]!r} is not a JSON pointer")
        node = self.root
        for part in pointer[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise self.fail(f"$ref {ref[:80]!r} does not resolve")
        return node

    @staticmethod
    def _pure_ref(value: Any) -> bool:
        return isinstance(value, dict) and isinstance(value.get("$ref"), str) and _ANNOTATIONS.issuperset(value)

    def _no_empty_cycle(self, start: dict[str, Any]) -> None:
        """A chain of schemas that are only `$ref`s must end in a schema with content."""
        seen = {id(start)}
        node: Any = start
        while self._pure_ref(node):
            node = self.resolve(node["$ref"])
            if id(node) in seen:
                raise self.fail("circular $ref chain with no schema content: nothing can match it")
            seen.add(id(node))
            if len(seen) > self.limits.max_ref_depth:
                raise self.fail(f"$ref chain deeper than {self.limits.max_ref_depth}", "max_ref_depth")

    def bound(self, depth: int, refs: int) -> None:
        if refs > self.limits.max_ref_depth:
            raise self.fail(f"$ref chain deeper than {self.limits.max_ref_depth}", "max_ref_depth")
        if depth > self.limits.max_depth:
            raise self.fail(
                f"nests deeper than {self.limits.max_depth} objects once each $ref is resolved", "max_depth"
            )

    def literals(self, schema: dict[str, Any]) -> None:
        values = schema.get("enum")
        if isinstance(values, list) and len(values) > self.limits.max_enum_values:
            raise self.fail(f"an enum of {len(values)} values, over {self.limits.max_enum_values}", "max_enum_values")
        spent = sum(len(_compact(v).encode()) for v in values) if isinstance(values, list) else 0
        if "const" in schema:
            spent += len(_compact(schema["const"]).encode())
        self.budget.literal_bytes += spent
        if self.budget.literal_bytes > self.limits.max_literal_bytes:
            raise self.fail(
                f"enum and const values over {self.limits.max_literal_bytes} bytes in all", "max_literal_bytes"
            )

    def visit_all(self, values: list[Any], depth: int, refs: int) -> tuple[int, int]:
        objects, hops = 0, 0
        for item in values:
            below = self.visit(item, depth, refs)
            objects, hops = max(objects, below[0]), max(hops, below[1])
        return objects, hops

    def visit(self, value: Any, depth: int, refs: int) -> tuple[int, int]:
        """The height of `value` (objects, $ref hops), raising as soon as a path passes a limit."""
        if isinstance(value, list):
            return self.visit_all(value, depth, refs)
        if not isinstance(value, dict):
            return (0, 0)
        key = id(value)
        if key in self.on_path:
            return (0, 0)  # a recursive schema: compiled as a rule that refers to itself, not expanded
        known = self.heights.get(key)
        if known is not None:
            self.bound(depth + known[0], refs + known[1])
            return known
        depth += 1
        self.bound(depth, refs)
        self.on_path.add(key)
        self.literals(value)
        objects, hops = 0, 0
        ref = value.get("$ref")
        if isinstance(ref, str):
            self._no_empty_cycle(value)
            below = self.visit(self.resolve(ref), depth, refs + 1)
            objects, hops = below[0], below[1] + 1
        for k, v in value.items():
            if k == "pattern" and isinstance(v, str):
                check_regex(v, self.limits, f"{self.where} pattern")
            if k in _LITERALS or k in _DATA or k == "$ref":
                continue
            if k in _SCHEMA_MAPS and isinstance(v, dict):
                below = self.visit_all(list(v.values()), depth, refs)
            else:
                below = self.visit(v, depth, refs)
            objects, hops = max(objects, below[0]), max(hops, below[1])
        self.on_path.discard(key)
        self.heights[key] = (objects + 1, hops)
        return objects + 1, hops


def check_schema(
    schema: Any,
    limits: GrammarLimits,
    where: str = "json_schema",
    *,
    size: int | None = None,
    budget: _Budget | None = None,
) -> None:
    """Raises GrammarLimitError when the JSON schema is over a limit or is a `$ref` cycle with no content."""
    nbytes = size if size is not None else len(_compact(schema).encode())
    if nbytes > limits.max_schema_bytes:
        raise GrammarLimitError(
            f"{where}: a schema of {nbytes} bytes, over {limits.max_schema_bytes} "
            f"(limit {limits.env('max_schema_bytes')})"
        )
    walk = _SchemaWalk(schema, limits, where, budget or _Budget())
    try:
        walk.visit(schema, 0, 0)
    except RecursionError as e:  # only where the limits are set above Python's own stack
        raise walk.fail(f"nests deeper than {limits.max_depth} objects", "max_depth") from e


def check_tool_schemas(schemas: list[tuple[str, Any]], limits: GrammarLimits) -> None:
    """Each tool's parameter schema, and all of them together: one grammar holds every tool."""
    budget = _Budget()
    total = 0
    for where, schema in schemas:
        size = len(_compact(schema).encode())
        total += size
        check_schema(schema, limits, where, size=size, budget=budget)
    if total > limits.max_schema_bytes:
        raise GrammarLimitError(
            f"tools: parameter schemas of {total} bytes in all, over {limits.max_schema_bytes} "
            f"(limit {limits.env('max_schema_bytes')})"
        )


def check_choices(choices: list[Any], limits: GrammarLimits, where: str = "choice") -> None:
    if len(choices) > limits.max_enum_values:
        raise GrammarLimitError(
            f"{where}: {len(choices)} choices, over {limits.max_enum_values} (limit {limits.env('max_enum_values')})"
        )
    nbytes = sum(len(str(c).encode()) for c in choices)
    if nbytes > limits.max_literal_bytes:
        raise GrammarLimitError(
            f"{where}: choices of {nbytes} bytes in all, over {limits.max_literal_bytes} "
            f"(limit {limits.env('max_literal_bytes')})"
        )


def check_regex(pattern: str, limits: GrammarLimits, where: str = "regex") -> None:
    """Length, group nesting and balance: escapes and character classes are skipped as a regex parser would."""
    if len(pattern) > limits.max_regex_chars:
        raise GrammarLimitError(
            f"{where}: a pattern of {len(pattern)} characters, over {limits.max_regex_chars} "
            f"(limit {limits.env('max_regex_chars')})"
        )
    depth, i, n = 0, 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if i + 1 >= n:
                raise GrammarLimitError(f"{where}: the pattern ends in a lone backslash")
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            if pattern[j : j + 1] == "]":  # a ']' first in a class is a literal
                i = j
        elif ch == "(":
            depth += 1
            if depth > limits.max_regex_depth:
                raise GrammarLimitError(
                    f"{where}: groups nest deeper than {limits.max_regex_depth} (limit {limits.env('max_regex_depth')})"
                )
        elif ch == ")":
            if depth == 0:
                raise GrammarLimitError(f"{where}: unbalanced ')' at position {i}")
            depth -= 1
        i += 1
    if in_class:
        raise GrammarLimitError(f"{where}: an unterminated character class '['")
    if depth:
        raise GrammarLimitError(f"{where}: {depth} unclosed '('")


def check_spec(kind: str, spec: str, limits: GrammarLimits) -> None:
    """A constraint as the engines carry it (switchyard.libs.engine.types.Constraint's kind and JSON text), checked
    where it is compiled: the gateway is not an engine's only caller."""
    try:
        if kind == "json_schema":
            check_schema(json.loads(spec), limits, "json_schema", size=len(spec.encode()))
        elif kind == "regex":
            check_regex(spec, limits)
        elif kind == "choice":
            check_choices(json.loads(spec), limits)
        elif kind == "tools":
            tools = json.loads(spec).get("tools") or []
            check_tool_schemas(
                [(f"tools[{i}].parameters", t.get("parameters") or {}) for i, t in enumerate(tools)], limits
            )
    except (ValueError, TypeError, AttributeError, RecursionError) as e:
        if isinstance(e, GrammarLimitError):
            raise
        raise GrammarLimitError(f"invalid {kind} constraint: {e}") from e
