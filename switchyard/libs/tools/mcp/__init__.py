"""Tools from MCP servers an operator registered: listed, planned and called through the official SDK."""

from switchyard.libs.tools.mcp.hub import McpHub

__all__ = ["McpHub"]
