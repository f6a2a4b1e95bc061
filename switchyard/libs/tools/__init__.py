"""Server-side tools for the `tools` stage: plan calls from the user's message, run them, render results.

Pure library (no NATS, no HTTP): the tools service imports it.

    planner, runner = ToolPlanner(settings), ToolRunner(settings)
    planner.warmup(); await runner.warmup()          # at startup: embedding model, sandbox probe
    calls = planner.plan(user_text, ctx)             # only the user's own message is planned over
    results = await runner.run(calls, ctx)           # parallel, time-limited, never raises
    prompt_block = results_to_prompt(results)        # goes after the history, marked as data
"""

from switchyard.libs.tools.planner import ToolPlanner
from switchyard.libs.tools.prompt import results_to_prompt
from switchyard.libs.tools.runner import ToolRunner
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import FileDoc, ToolCall, ToolContext, ToolResult

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
