"""The demo MCP server (demo_server.py) as the tests run it: its own process on a free port, or the
registration that runs it over stdio inside the sandbox."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from switchyard.schemas import McpServerSpec
from tests.wait import wait_until

SCRIPT = Path(__file__).with_name("demo_server.py").resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


@contextlib.contextmanager
def demo_http() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The demo server over streamable HTTP: (its /mcp URL, its process), stopped when the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: _accepts(port), 30, "the demo MCP server to listen", ignore=(OSError,))
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


def stdio_spec(name: str = "local", **extra: object) -> McpServerSpec:
    """A registration that runs the demo server over stdio (the sandbox exposes only its script)."""
    return McpServerSpec.model_validate(
        {
            "name": name,
            "transport": "stdio",
            "command": [sys.executable, str(SCRIPT), "stdio"],
            "read_only_paths": [str(SCRIPT)],
            **extra,
        }
    )
