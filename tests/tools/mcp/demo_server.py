"""A real MCP server on the SDK's own FastMCP, for the tests: `python demo_server.py http PORT` serves
streamable HTTP on 127.0.0.1:PORT (path /mcp); `python demo_server.py stdio` serves over stdin/stdout.

Stdlib and the `mcp` SDK only: the stdio form runs inside the code sandbox, which sees nothing of the
repository but this file."""

from __future__ import annotations

import asyncio
import sys

from mcp.server.fastmcp import FastMCP

STOCK = {"A-100": 42, "B-200": 0, "C-300": 7}


def build(port: int = 0) -> FastMCP:
    server = FastMCP("inventory", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool()
    def lookup_stock(sku: str) -> str:
        """How many units of a product (by its SKU code) are in stock at the warehouse right now."""
        code = sku.strip().upper()
        for known, units in STOCK.items():
            if known in code:
                return f"SKU {known}: {units} units in stock (warehouse Delta-7)"
        return f"SKU {code[:40]} is not in the catalogue"

    @server.tool()
    async def slow_report(topic: str) -> str:
        """Write the quarterly warehouse audit report (never finishes: a server that hangs)."""
        await asyncio.sleep(3600)
        return topic

    @server.tool()
    def flood(size: int) -> str:
        """Return `size` bytes of filler (a server that answers too much)."""
        return "x" * size

    @server.tool()
    def fail(reason: str) -> str:
        """Raise an error (a tool that errors)."""
        raise ValueError(f"refused: {reason}")

    @server.tool()
    def whoami() -> str:
        """What the process can see of its host: network, files, user."""
        import os
        import socket

        try:
            socket.create_connection(("1.1.1.1", 53), timeout=1).close()
            net = "network: reachable"
        except OSError as e:
            net = f"network: {type(e).__name__}"
        home = "repository visible" if os.path.exists("/work/main/pyproject.toml") else "repository hidden"
        return f"uid={os.getuid()} {net} {home}"

    @server.tool(name="unsafe.name")
    def unsafe() -> str:
        """A name with a dot, which must never reach a subject or a prompt."""
        return "never called"

    return server


if __name__ == "__main__":
    if sys.argv[1] == "http":
        build(int(sys.argv[2])).run(transport="streamable-http")
    else:
        build().run(transport="stdio")
