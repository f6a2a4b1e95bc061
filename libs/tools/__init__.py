"""Server-side tools for the `tools` stage: plan calls from the user's message, run them, render results.

Pure library (no NATS, no HTTP): the tools service imports it.
"""

from libs.tools.planner import ToolPlanner
from libs.tools.prompt import results_to_prompt
from libs.tools.runner import ToolRunner
from libs.tools.settings import ToolSettings
from libs.tools.types import FileDoc, ToolCall, ToolContext, ToolResult

__all__ = [
    "FileDoc",
    "ToolCall",
    "ToolContext",
    "ToolPlanner",
    "ToolResult",
    "ToolRunner",
    "ToolSettings",
    "results_to_prompt",
]
