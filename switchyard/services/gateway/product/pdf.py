"""Reading a PDF's text under a budget: each parse is a child process (pdf_worker.py) with its own limits,
killed at the wall-clock limit, so no file can hold the gateway's event loop or its CPU."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field

from switchyard import CHECKOUT
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.settings import GatewaySettings


@dataclass
class PdfReader:
    settings: GatewaySettings
    _slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self._slots = asyncio.Semaphore(self.settings.pdf_max_parallel)

    def _limits(self) -> str:
        s = self.settings
        return json.dumps(
            {
                "max_pages": s.pdf_max_pages,
                "max_content_bytes": s.pdf_max_content_bytes,
                "cpu_s": s.pdf_parse_timeout_s,
                "memory_bytes": s.pdf_max_memory_bytes,
            }
        )

    async def text(self, data: bytes) -> str:
        """The PDF's text layer; 413 naming the limit a file reaches, 400 for a file pypdf cannot read."""
        async with self._slots:
            out = await self._run(data)
        if "text" in out:
            return str(out["text"])
        code = ErrorCode.payload_too_large if out.get("error") == "too_large" else ErrorCode.bad_request
        raise ApiError(code, str(out.get("message") or "cannot read this PDF"))

    async def _run(self, data: bytes) -> dict[str, object]:
        timeout = self.settings.pdf_parse_timeout_s
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH")) if p),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "switchyard.services.gateway.product.pdf_worker",
            self._limits(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(data), timeout)
        except TimeoutError:
            raise ApiError(
                ErrorCode.payload_too_large,
                f"reading the PDF took over {timeout:g} s; uploads are limited to {timeout:g} s of parsing",
            ) from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        try:
            out: dict[str, object] = json.loads(stdout)
        except json.JSONDecodeError:
            # Killed by its own CPU or memory limit before it could say why.
            raise ApiError(
                ErrorCode.payload_too_large,
                f"reading the PDF exceeded its limits ({timeout:g} s of CPU, "
                f"{self.settings.pdf_max_memory_bytes} bytes of memory)",
            ) from None
        return out
