"""MCP servers an operator registers (`/v1/admin/mcp-servers`), kept in the `mcp_servers` key-value bucket
that every tools replica watches, and the tools they offer.

A server's tools reach the model, the planner and `GET /v1/tools` as `<server>__<tool>`: the server name
has no underscore, so the first `__` splits the two, and both parts are checked here before either
touches a subject, a key or a prompt.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from switchyard.schemas.messages import SafetyVerdict, ToolEvent

# Lower-case letters, digits and hyphens: no `_` (the namespace separator), `.`, `*`, `>` or spaces.
MCP_SERVER_PATTERN = r"^[a-z][a-z0-9-]{0,23}$"
# A tool name as its server spells it; with the server's and the separator it stays within the 64
# characters a function name may have (OpenAI's limit, and `FunctionDef`'s pattern).
MCP_TOOL_PATTERN = r"^[A-Za-z0-9_-]{1,38}$"
SEPARATOR = "__"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9-]{1,64}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
MAX_DESCRIPTION_CHARS = 1024
MAX_SCHEMA_BYTES = 16_384
# What a credential (a header or environment value) reads as when shown back.
MASK = "***"

_TOOL = re.compile(MCP_TOOL_PATTERN)
_SERVER = re.compile(MCP_SERVER_PATTERN)


def namespaced(server: str, tool: str) -> str:
    """`<server>__<tool>`; ValueError when either part is not a safe name."""
    if not _SERVER.fullmatch(server) or not _TOOL.fullmatch(tool):
        raise ValueError(f"not a safe MCP tool name: {server[:40]!r} / {tool[:60]!r}")
    return f"{server}{SEPARATOR}{tool}"


def split_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of a namespaced name; None when `name` is not one."""
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not _SERVER.fullmatch(server) or not _TOOL.fullmatch(tool):
        return None
    return server, tool


def scope_key(tenant: str | None, name: str) -> str:
    """The bucket key of a registration: `global.<name>`, or `t<digest of the tenant>.<name>` so that no
    tenant string ever reaches a subject."""
    if tenant is None:
        return f"global.{name}"
    return "t" + hashlib.sha256(tenant.encode()).hexdigest()[:24] + "." + name


class McpServerSpec(BaseModel):
    """What an operator registers: one MCP server, for every tenant (`tenant` null) or one tenant's keys."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=MCP_SERVER_PATTERN, description="its tools are named `<name>__<tool>`")
    tenant: str | None = Field(default=None, min_length=1, max_length=128, description="null: every tenant")
    transport: Literal["http", "stdio"]
    url: str | None = Field(default=None, max_length=2048, description="streamable HTTP endpoint (http)")
    # Sent with every HTTP request (an Authorization header, say); never shown back in full.
    headers: dict[str, str] = Field(default_factory=dict, max_length=16)
    # stdio: the server's argv, run inside the code sandbox's isolation, one process per call.
    command: list[str] = Field(default_factory=list, max_length=32)
    env: dict[str, str] = Field(default_factory=dict, max_length=32)
    # stdio: host folders the process may read (its script, its data); everything else is hidden.
    read_only_paths: list[str] = Field(default_factory=list, max_length=8)
    timeout_s: float = Field(default=10.0, gt=0, le=120, description="per call: connect, handshake and call")
    max_result_bytes: int = Field(default=16_384, ge=256, le=1_048_576)
    description: str = Field(default="", max_length=500)
    enabled: bool = True
    # Whether the planner may call its tools before the model writes (else they are listed only).
    plan: bool = True

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.fullmatch(HEADER_NAME_PATTERN, k):
                raise ValueError(f"header name {k[:40]!r} is not a token (letters, digits, hyphens)")
            if len(val) > 4096 or any(c in val for c in "\r\n\x00"):
                raise ValueError(f"header {k!r}: at most 4096 characters and no line breaks")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if any(not a or len(a) > 1024 or "\x00" in a for a in v):
            raise ValueError("each command argument is 1 to 1024 characters, without NUL")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not re.fullmatch(ENV_NAME_PATTERN, k) or len(val) > 4096 or "\x00" in val:
                raise ValueError(f"environment variable {k[:40]!r}: a name of letters, digits, _; a value under 4096")
        return v

    @field_validator("read_only_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/") or len(p) > 1024 or p.rstrip("/") == "" or "\x00" in p:
                raise ValueError(f"read_only_paths: {p[:80]!r} is not an absolute path below /")
        return v

    @model_validator(mode="after")
    def _transport(self) -> McpServerSpec:
        if self.transport == "http":
            if self.url is None:
                raise ValueError("transport http needs a url")
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("url must be an http:// or https:// address with a host")
            if self.command or self.env or self.read_only_paths:
                raise ValueError("command, env and read_only_paths are for transport stdio")
        else:
            if not self.command:
                raise ValueError("transport stdio needs a command (the server's argv)")
            if self.url is not None or self.headers:
                raise ValueError("url and headers are for transport http")
        return self

    @property
    def key(self) -> str:
        return scope_key(self.tenant, self.name)

    def shown(self) -> McpServerSpec:
        """This spec with header and environment values masked (they hold credentials)."""
        return self.model_copy(
            update={"headers": dict.fromkeys(self.headers, MASK), "env": dict.fromkeys(self.env, MASK)}
        )


class McpServerEntry(BaseModel):
    """A registration as the bucket holds it."""

    spec: McpServerSpec
    created_ms: int = 0
    # Changes with every registration of this name and tenant: a listing names the version it listed.
    updated_ms: int = 0


class McpToolSpec(BaseModel):
    """One tool a registered server offers, as the pipeline names it."""

    name: str = Field(description="`<server>__<tool>`")
    server: str
    tool: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class McpServerState(BaseModel):
    """What a tools replica found at a server when it last listed its tools."""

    key: str
    # The registration's `updated_ms` this listing is of.
    updated_ms: int = 0
    tools: list[McpToolSpec] = Field(default_factory=list)
    # Tools the server offered under names this pipeline will not use (unsafe, too long, schema too big).
    skipped: list[str] = Field(default_factory=list)
    error: str | None = None
    listed_ms: int = 0


class McpStatusQuery(BaseModel):
    pass


class McpStatus(BaseModel):
    """`subjects.TOOLS_MCP_STATUS`: one tools replica's view of every registered server."""

    replica: str = ""
    servers: list[McpServerState] = Field(default_factory=list)


class McpServerView(BaseModel):
    """`/v1/admin/mcp-servers`: a registration (credentials masked) and its tools as a tools replica sees them."""

    key: str
    spec: McpServerSpec
    created_ms: int = 0
    updated_ms: int = 0
    state: Literal["ready", "error", "disabled", "unknown"]
    tools: list[McpToolSpec] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)
    error: str | None = None


class McpServerList(BaseModel):
    object: Literal["list"] = "list"
    data: list[McpServerView] = Field(default_factory=list)


class McpCall(BaseModel):
    """One MCP tool call in a request's record (the tools stage's part)."""

    id: str
    name: str
    server: str
    transport: Literal["http", "stdio"]
    status: Literal["ok", "error", "timeout"]
    duration_ms: float = 0.0
    result_bytes: int = 0
    truncated: bool = False
    error: str | None = None


class McpToolRun(BaseModel):
    """inference → tools (`tools.mcp.call`): run one call the model wrote to an MCP tool it was offered."""

    rid: str
    tenant: str
    user: str = ""
    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    name: str = Field(max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Which of the request's model turns wrote it (0: the first).
    round: int = Field(0, ge=0)


class McpToolRan(BaseModel):
    """The call's result: as the client was shown it, as the record keeps it, and fenced as data for the
    model's next turn."""

    round: int = 0
    event: ToolEvent
    call: McpCall
    prompt: str = ""
    verdicts: list[SafetyVerdict] = Field(default_factory=list)
