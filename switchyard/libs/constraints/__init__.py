"""Bounds on what a decoding constraint may ask of the grammar compiler, checked where a constraint
enters (the gateway) and again where it is compiled (the engine). Torch-free and xgrammar-free."""

from switchyard.libs.constraints.check import (
    GrammarLimitError,
    check_choices,
    check_regex,
    check_schema,
    check_spec,
    check_tool_schemas,
)
from switchyard.libs.constraints.limits import GrammarLimits

__all__ = [
    "GrammarLimitError",
    "GrammarLimits",
    "check_choices",
    "check_regex",
    "check_schema",
    "check_spec",
    "check_tool_schemas",
]
