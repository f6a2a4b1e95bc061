"""The interface every server-side tool implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from switchyard.libs.tools.types import ToolContext


class ToolError(Exception):
    """An expected failure (bad arguments, not found): reported to the model as status 'error'."""


@dataclass
class ToolOutput:
    output: str
    data: Any = None
    sources: list[str] = field(default_factory=list)
    status: str = "ok"  # a tool may itself report 'error'/'timeout' yet keep partial data (sandbox)


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments

    async def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput: ...
