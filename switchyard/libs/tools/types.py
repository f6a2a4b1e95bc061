"""Plain data passed between the planner, the runner and the tools service."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileDoc:
    """A file the user uploaded; searched by the `docs` tool alongside the policies."""

    id: str
    name: str
    text: str


@dataclass
class ToolContext:
    tenant: str
    user: str  # the caller: orders are only ever looked up for (tenant, user)
    rid: str
    files: list[FileDoc] = field(default_factory=list)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolResult:
    call_id: str
    name: str
    arguments: dict[str, Any]
    status: str  # 'ok' | 'error' | 'timeout'
    output: str  # compact text for the prompt
    data: Any = None  # structured result (JSON-able), for the client-visible `tool` event
    sources: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
