"""The grammar limits, one settings class read by the gateway and the inference service alike
(SWITCHYARD_GRAMMAR_*), so a constraint the edge admits is one the engine admits too."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "SWITCHYARD_GRAMMAR_"


class GrammarLimits(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    # A JSON schema (a response_format, a structured_outputs.json, one tool's parameters, or all of a
    # request's tools together), as compact JSON.
    max_schema_bytes: int = 64 * 1024
    # `$ref` hops along any path through a schema, and objects nested along any path once every `$ref` is
    # replaced by what it names. xgrammar converts a schema recursively: a flat 4,500-hop chain overflowed
    # its stack.
    max_ref_depth: int = 32
    max_depth: int = 64
    # Values of one `enum` (or `structured_outputs.choice` list), and the bytes of every enum, const and
    # choice value of one constraint together: distinct literals are what make compiles slow and large
    # (10,000 values: ~15 CPU-s and ~250 MB).
    max_enum_values: int = 1024
    max_literal_bytes: int = 16 * 1024
    # A regular expression (a regex constraint, or a schema's `pattern`): characters and group nesting.
    max_regex_chars: int = 4096
    max_regex_depth: int = 32
    # The engine's compile of one grammar, in its worker process; past it the worker is killed and the
    # request refused.
    compile_timeout_s: float = 10.0
    # Compiled grammars kept for reuse, least recently used evicted first, by their own size.
    cache_bytes: int = 64 * 1024 * 1024

    def env(self, field: str) -> str:
        """The environment variable that sets `field`, for error messages."""
        return f"{ENV_PREFIX}{field.upper()}"
