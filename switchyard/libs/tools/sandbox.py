"""`code`: runs a Python snippet in a sandboxed process and reports its output.

The heavy lifting (namespaces, mounts, uid switch, rlimits) is in sandbox_launcher.py; this side
writes the snippet to a throwaway folder, enforces the wall-clock limit and the output cap, and
makes sure nothing it started is left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from asyncio import FIRST_COMPLETED
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.libs.tools.base import ToolError, ToolOutput
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolContext

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
SETUP_FAILED = 125
_uids = itertools.count()


@dataclass
class RunOutcome:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    isolated: bool
    duration_ms: float


def _sandbox_uid() -> int:
    # A fresh unprivileged uid per run: RLIMIT_NPROC counts processes per uid, so a private uid
    # gives each run its own process budget and no access to anything another run created.
    return 200_000 + (os.getpid() * 7919 + next(_uids)) % 100_000


def _exposed_paths(python: str) -> list[str]:
    real = Path(os.path.realpath(python))
    paths = {str(real.parent.parent), os.path.realpath(Path(python).parent.parent)}
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths.update({os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)})
    return sorted(p for p in paths if p != "/")


def _prepare_workdir(code: str) -> str:
    workdir = tempfile.mkdtemp(prefix="sy-code-")
    os.chmod(workdir, 0o755)  # the launcher reads it before switching to the sandbox uid
    Path(workdir, "main.py").write_text(code, encoding="utf-8")
    return workdir


class Sandbox:
    def __init__(self, settings: ToolSettings) -> None:
        self.settings = settings
        self.python = settings.sandbox_python or sys.executable
        self._isolation: bool | None = None
        self._probe_lock = asyncio.Lock()

    async def isolation_available(self) -> bool:
        """Probe once whether namespaces can be created here (root or CAP_SYS_ADMIN, no seccomp block)."""
        async with self._probe_lock:
            if self._isolation is None:
                if not sys.platform.startswith("linux"):
                    self._isolation = False
                else:
                    out = await self._execute("print('ok')", isolated=True)
                    self._isolation = out.exit_code == 0 and out.stdout.strip() == "ok"
            return self._isolation

    def usable(self) -> bool | None:
        """Whether code may run here; None until the isolation probe has run."""
        if self._isolation is None:
            return None
        return self._isolation or self.settings.allow_unisolated_code

    async def run(self, code: str) -> RunOutcome:
        isolated = await self.isolation_available()
        if not isolated and not self.settings.allow_unisolated_code:
            raise ToolError(
                "code execution is disabled: process isolation (network/PID/mount namespaces) is not "
                "available on this host and allow_unisolated_code is off"
            )
        return await self._execute(code, isolated=isolated)

    async def _execute(self, code: str, *, isolated: bool) -> RunOutcome:
        s = self.settings
        workdir = _prepare_workdir(code)
        cfg: dict[str, Any] = {
            "mode": "isolated" if isolated else "plain",
            "workdir": workdir,
            "python": self.python,
            "uid": _sandbox_uid(),
            "cpu_s": s.sandbox_cpu_s,
            "mem_bytes": s.sandbox_memory_mb * 1024 * 1024,
            "nproc": s.sandbox_max_procs,
            "fsize": s.sandbox_max_file_mb * 1024 * 1024,
            "tmpfs_mb": s.sandbox_tmpfs_mb,
            "expose": _exposed_paths(self.python),
        }
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            str(LAUNCHER),
            json.dumps(cfg),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so we can kill everything it spawned
        )
        cap = s.sandbox_max_output_bytes
        bufs = {"stdout": bytearray(), "stderr": bytearray()}
        flood = asyncio.Event()

        async def pump(name: str, stream: asyncio.StreamReader) -> None:
            while chunk := await stream.read(65536):
                buf = bufs[name]
                buf += chunk[: max(0, cap - len(buf))]
                if len(buf) >= cap:
                    # Stop a flood at the cap instead of draining megabytes we would discard anyway.
                    flood.set()
                    return

        assert proc.stdout is not None and proc.stderr is not None
        # Finished = the program exited and its pipes are drained; a flood or the wall limit cut it short.
        finished: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(pump("stdout", proc.stdout), pump("stderr", proc.stderr), proc.wait())
        )
        flooded: asyncio.Future[Any] = asyncio.ensure_future(flood.wait())
        try:
            await asyncio.wait({finished, flooded}, timeout=s.sandbox_wall_s, return_when=FIRST_COMPLETED)
            truncated = flood.is_set()
            timed_out = not truncated and not finished.done()
        finally:
            # Also reached on cancellation by the runner's own time limit.
            await asyncio.shield(_stop(proc, isolated))
            for t in (finished, flooded):
                t.cancel()
            await asyncio.gather(finished, flooded, return_exceptions=True)
            # Read the dead process's pipes to EOF so asyncio closes its transport now, not at GC.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read()), 1.0)
            shutil.rmtree(workdir, ignore_errors=True)
        return RunOutcome(
            exit_code=None if timed_out else proc.returncode,
            stdout=bufs["stdout"].decode("utf-8", "replace"),
            stderr=bufs["stderr"].decode("utf-8", "replace"),
            timed_out=timed_out,
            truncated=truncated,
            isolated=isolated,
            duration_ms=round((time.perf_counter() - start) * 1000, 1),
        )


async def _stop(proc: asyncio.subprocess.Process, isolated: bool) -> None:
    if proc.returncode is None and isolated:
        # The launcher kills the namespace's init (taking every sandbox process with it) and reaps it.
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 1.0)
    if proc.returncode is None or not isolated:
        # A launcher that did not exit, or plain mode (where the program's children share its
        # process group and nothing else reaps them): kill the whole group. An isolated run that
        # ended on its own has nothing left: its PID namespace died with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def describe(out: RunOutcome, limits: ToolSettings) -> tuple[str, str]:
    """(status, compact text for the prompt)."""
    if out.timed_out:
        status, head = "timeout", f"Stopped: exceeded the {limits.sandbox_wall_s:g}s time limit."
    elif out.truncated:
        status, head = "error", f"Stopped: output exceeded {limits.sandbox_max_output_bytes} bytes."
    elif out.exit_code == 0:
        status, head = "ok", "Exit code 0."
    elif out.exit_code == 128 + signal.SIGXCPU or out.exit_code == 128 + signal.SIGKILL:
        status, head = "error", f"Stopped: exceeded the {limits.sandbox_cpu_s}s CPU limit (or was killed)."
    elif out.exit_code == SETUP_FAILED and out.stderr.startswith("sandbox setup failed"):
        status, head = "error", "The sandbox could not start."
    else:
        status, head = "error", f"Exit code {out.exit_code}."
    parts = [head]
    if out.stdout:
        parts.append("stdout:\n" + out.stdout.rstrip())
    if out.stderr:
        # Tracebacks matter most at their end.
        err = out.stderr.rstrip()
        parts.append("stderr:\n" + (err if len(err) < 1500 else "..." + err[-1500:]))
    return status, "\n".join(parts)


class CodeTool:
    name = "code"
    description = (
        "Run a short Python 3 program in an isolated sandbox (no network, limited CPU, memory and time) "
        "and return what it prints."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source; print what you need"}},
        "required": ["code"],
        "additionalProperties": False,
    }

    def __init__(self, settings: ToolSettings) -> None:
        self.settings = settings
        self.sandbox = Sandbox(settings)

    async def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("missing 'code'")
        if len(code) > 100_000:
            raise ToolError("code too long")
        out = await self.sandbox.run(code)
        status, text = describe(out, self.settings)
        data = {
            "exit_code": out.exit_code,
            "stdout": out.stdout,
            "stderr": out.stderr,
            "timed_out": out.timed_out,
            "truncated": out.truncated,
            "isolated": out.isolated,
        }
        return ToolOutput(output=text, data=data, status=status)
