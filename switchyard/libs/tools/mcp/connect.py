"""One session with one registered MCP server, through the official `mcp` SDK, with every byte bounded.

Streamable HTTP goes through an httpx client whose transport stops a response past a byte cap. A stdio
server runs inside the code sandbox (sandbox_launcher.py: namespaces, no network, a throwaway uid,
rlimits), one process per session, and the launcher stops it once its stdout passes the cap; the SDK's
stdio client talks to the launcher and ends it (and with it the whole namespace) when the session closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from switchyard.libs.tools.sandbox import LAUNCHER, _exposed_paths, _sandbox_uid
from switchyard.libs.tools.settings import ToolSettings
from switchyard.schemas.mcp import McpServerSpec


class TooLarge(Exception):
    """A server sent more bytes than its cap allows."""


@dataclass
class Meter:
    """What one session received, so a failure can say it was the cap that ended it, and the caller can
    stop waiting at once when it is passed."""

    cap: int
    received: int = 0
    exceeded: bool = False
    tripped: asyncio.Event = field(default_factory=asyncio.Event)

    def trip(self) -> None:
        self.exceeded = True
        self.tripped.set()


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, meter: Meter):
        self.inner = inner
        self.meter = meter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.meter.received += len(chunk)
            if self.meter.received > self.meter.cap:
                self.meter.trip()
                raise TooLarge(f"the server sent more than {self.meter.cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    """The default transport, with every response body counted against one session's meter."""

    def __init__(self, meter: Meter):
        self.inner = httpx.AsyncHTTPTransport()
        self.meter = meter

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        assert isinstance(resp.stream, httpx.AsyncByteStream)
        return httpx.Response(
            resp.status_code,
            headers=resp.headers,
            stream=_CappedStream(resp.stream, self.meter),
            extensions=resp.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def launcher_config(spec: McpServerSpec, settings: ToolSettings, workdir: str, *, isolated: bool, cap: int) -> dict:
    """The sandbox launcher's config that runs the server's argv with the MCP limits."""
    argv0 = shutil.which(spec.command[0]) or spec.command[0]
    expose = set(_exposed_paths(argv0)) if os.path.isabs(argv0) else set()
    expose.update(os.path.realpath(p) for p in spec.read_only_paths if os.path.exists(p))
    return {
        "mode": "isolated" if isolated else "plain",
        "workdir": workdir,
        "python": sys.executable,
        "argv": [argv0, *spec.command[1:]],
        "env": spec.env,
        "stdout_cap": cap,
        "uid": _sandbox_uid(),
        "cpu_s": settings.mcp_stdio_cpu_s,
        "mem_bytes": settings.mcp_stdio_memory_mb * 1024 * 1024,
        "nproc": settings.sandbox_max_procs,
        "fsize": settings.sandbox_max_file_mb * 1024 * 1024,
        "tmpfs_mb": settings.sandbox_tmpfs_mb,
        "expose": sorted(p for p in expose if p != "/"),
    }


@contextlib.asynccontextmanager
async def session(
    spec: McpServerSpec, settings: ToolSettings, meter: Meter, *, isolated: bool
) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` with the server; the caller bounds its time."""
    async with contextlib.AsyncExitStack() as stack:
        if spec.transport == "http":
            assert spec.url is not None
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    headers=spec.headers,
                    timeout=httpx.Timeout(spec.timeout_s),
                    transport=CappedTransport(meter),
                    follow_redirects=False,
                )
            )
            read, write, _ = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client, terminate_on_close=True)
            )
        else:
            workdir = tempfile.mkdtemp(prefix="sy-mcp-")
            os.chmod(workdir, 0o755)
            stack.callback(shutil.rmtree, workdir, True)
            cfg = launcher_config(spec, settings, workdir, isolated=isolated, cap=meter.cap)
            errlog = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
            stack.callback(_read_launcher_verdict, errlog, meter)
            params = StdioServerParameters(
                command=sys.executable, args=["-I", "-S", str(LAUNCHER), json.dumps(cfg)], env={}
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        sess = await stack.enter_async_context(ClientSession(read, write))
        await sess.initialize()
        yield sess


def _read_launcher_verdict(errlog: Any, meter: Meter) -> None:
    """The launcher says on stderr when it stopped a server for its output (the server's own stderr is
    there too, and goes nowhere else)."""
    errlog.seek(0, os.SEEK_END)
    errlog.seek(max(0, errlog.tell() - 4096))
    if "sandbox: output exceeded" in errlog.read():
        meter.trip()


def result_text(result: Any) -> tuple[str, Any]:
    """A `CallToolResult` as text for the prompt, and its structured content (if any) for the record."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            parts.append(f"[{kind or 'content'} {getattr(block, 'mimeType', '')}]".replace(" ]", "]"))
    structured = result.structuredContent
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts), structured
