"""Runs planned tool calls in parallel, each under its own time limit, never raising."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from switchyard.libs.tools.base import Tool, ToolError
from switchyard.libs.tools.docs import DocsTool
from switchyard.libs.tools.orders import OrdersDB, OrdersTool
from switchyard.libs.tools.sandbox import CodeTool
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolCall, ToolContext, ToolResult
from switchyard.libs.tools.web import WebTool

log = logging.getLogger(__name__)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 40].rstrip() + f"\n[... truncated, {len(text)} chars in all]"


class ToolRunner:
    def __init__(self, settings: ToolSettings) -> None:
        self.settings = settings
        self._orders_db = OrdersDB(settings.orders_db, settings.orders_sql)
        self.tools: dict[str, Tool] = {}
        self.timeouts: dict[str, float] = {}
        self.docs = DocsTool(settings)
        self.register(OrdersTool(self._orders_db), settings.orders_timeout_s)
        self.register(self.docs, settings.docs_timeout_s)
        self.code = CodeTool(settings)
        self.register(self.code, settings.code_timeout_s)
        self.register(WebTool(settings), settings.web_timeout_s)

    def register(self, tool: Tool, timeout_s: float) -> None:
        """Add (or replace) a server-side tool with its time limit."""
        self.tools[tool.name] = tool
        self.timeouts[tool.name] = timeout_s

    async def warmup(self) -> None:
        """Load the embedding model, index the policies and probe sandbox isolation before the first
        request (seconds on CPU); without it the first requests fall back to keyword search."""
        await asyncio.gather(asyncio.to_thread(self.docs.warmup), self.code.sandbox.isolation_available())

    def specs(self) -> list[dict[str, Any]]:
        # Once the probe has shown code cannot run here, do not advertise it.
        hidden = set() if self.code.sandbox.usable() is not False else {self.code.name}
        return [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in self.tools.values()
            if t.name not in hidden
        ]

    async def run(self, calls: list[ToolCall], ctx: ToolContext) -> list[ToolResult]:
        calls = calls[: self.settings.max_calls]
        return list(await asyncio.gather(*(self._run_one(c, ctx) for c in calls)))

    async def _run_one(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()

        def result(status: str, output: str, data: Any = None, sources: list[str] | None = None) -> ToolResult:
            return ToolResult(
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                status=status,
                output=truncate(output, self.settings.max_output_chars),
                data=data,
                sources=sources or [],
                duration_ms=round((time.perf_counter() - start) * 1000, 2),
            )

        tool = self.tools.get(call.name)
        if tool is None:
            return result("error", f"unknown tool {call.name!r}")
        timeout = self.timeouts[call.name]
        try:
            out = await asyncio.wait_for(tool.run(dict(call.arguments), ctx), timeout)
        except TimeoutError:
            return result("timeout", f"{call.name} did not finish within {timeout:g}s")
        except ToolError as e:
            return result("error", str(e))
        except asyncio.CancelledError:
            raise  # the request itself was cancelled; let the caller see it
        except Exception as e:
            # One broken tool must not take down the request; the model is told it failed.
            log.exception("tool %s failed (rid=%s)", call.name, ctx.rid)
            return result("error", f"{call.name} failed: {type(e).__name__}")
        return result(out.status, out.output, out.data, out.sources)

    async def aclose(self) -> None:
        self._orders_db.close()
