"""Structured outputs on the OpenAI-compatible API: `response_format` and vLLM's `structured_outputs`,
read into the pipeline's `ResponseFormat` (the engine decodes the answer under its grammar)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from switchyard.libs.constraints import GrammarLimitError, GrammarLimits, check_choices, check_regex, check_schema
from switchyard.schemas import ErrorCode, ResponseFormat
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict


class JsonSchemaFormat(Strict):
    IGNORED = frozenset({"description"})
    name: str = Field(min_length=1, max_length=64)
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    # Strict or not, the answer is decoded under the schema's grammar: it always validates.
    strict: bool | None = None


class ResponseFormatIn(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(Strict):
    """vLLM's extension: exactly one of a JSON schema, a regular expression or a list of choices."""

    json_: dict[str, Any] | None = Field(None, alias="json")
    regex: str | None = Field(None, min_length=1)
    choice: list[str] | None = Field(None, min_length=1, max_length=256)


def response_format_of(
    fmt: ResponseFormatIn | None, structured: StructuredOutputs | None, limits: GrammarLimits
) -> ResponseFormat | None:
    """The pipeline's format, its grammar bounded (`GrammarLimits`) before anything compiles it: 400 naming
    the limit, or what makes the constraint meaningless."""
    found = _format_of(fmt, structured)
    try:
        if found is not None and found.type == "json_schema":
            where = "structured_outputs.json" if structured is not None else "response_format.json_schema"
            check_schema(found.json_schema or {}, limits, where)
        elif found is not None and found.type == "regex":
            check_regex(found.regex or "", limits, "structured_outputs.regex")
        elif found is not None and found.type == "choice":
            check_choices(found.choices, limits, "structured_outputs.choice")
    except GrammarLimitError as e:
        raise ApiError(ErrorCode.bad_request, str(e)) from e
    return found


def _format_of(fmt: ResponseFormatIn | None, structured: StructuredOutputs | None) -> ResponseFormat | None:
    if fmt is not None and fmt.type != "text" and structured is not None:
        raise ApiError(ErrorCode.bad_request, "send response_format or structured_outputs, not both")
    if structured is not None:
        given = [k for k in ("json_", "regex", "choice") if getattr(structured, k) is not None]
        if len(given) != 1:
            raise ApiError(ErrorCode.bad_request, "structured_outputs takes exactly one of json, regex and choice")
        if structured.json_ is not None:
            return ResponseFormat(type="json_schema", json_schema=structured.json_)
        if structured.regex is not None:
            return ResponseFormat(type="regex", regex=structured.regex)
        return ResponseFormat(type="choice", choices=structured.choice or [])
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    if fmt.json_schema is None:
        raise ApiError(ErrorCode.bad_request, "response_format of type json_schema needs its json_schema")
    return ResponseFormat(type="json_schema", json_schema=fmt.json_schema.schema_)
