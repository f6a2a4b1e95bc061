"""What `switchyard run` needs to keep its processes up: the restart delay, a stop latch a signal handler
may set, and the status file and log the operator reads (`switchyard status`, `var/logs/supervisor.log`)."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

State = Literal["starting", "running", "restarting", "stopped"]


@dataclass(frozen=True)
class Backoff:
    """0.5 s, 1 s, 2 s … up to `cap_s` between restarts of a process that keeps dying; one that stayed up
    `reset_after_s` is healthy again, and its next exit is restarted after `initial_s`."""

    initial_s: float = 0.5
    factor: float = 2.0
    cap_s: float = 30.0
    reset_after_s: float = 60.0

    def delay(self, attempt: int) -> float:
        """The wait before restart number `attempt` (1-based) of a run of quick exits."""
        return float(min(self.cap_s, self.initial_s * self.factor ** max(0, attempt - 1)))

    def next_attempt(self, attempt: int, uptime_s: float) -> int:
        return 1 if uptime_s >= self.reset_after_s else attempt + 1


class StopLatch:
    """Set once and seen by every waiter from then on. Setting it is one write to a pipe and takes no lock,
    so a signal handler may set it while the thread it interrupted holds any lock of ours."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            try:
                os.write(self._write, b"x")
            except BlockingIOError:  # a byte is already there: waiters see it
                pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once set; False when `timeout_s` passed first. The byte is never read, so it stays readable."""
        if self._set:
            return True
        ready, _, _ = select.select([self._read], [], [], timeout_s)
        return bool(ready) or self._set


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


@dataclass
class ServiceStatus:
    pid: int | None = None
    state: State = "starting"
    restarts: int = 0
    # Quick exits in a row; the backoff grows with it and it drops back to 1 after a long enough run.
    attempt: int = 0
    last_exit: int | None = None
    started_at: float = 0.0
    # Monotonic start time: uptime is measured with it, so a clock step cannot reset the backoff.
    started_mono: float = field(default=0.0, repr=False)

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        del out["started_mono"]
        return out


class SupervisorLog:
    """One JSON object per line in `logs/supervisor.log`, echoed to the console (stderr)."""

    def __init__(self, path: Path | None, echo: TextIO | None = None):
        self.path = path
        self.echo = echo

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()), "event": event, **fields})
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(line + "\n")
        if self.echo is not None:
            print(line, file=self.echo, flush=True)


def write_status(path: Path, doc: dict[str, Any]) -> None:
    """Replaced whole (write, then rename), so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return doc


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def print_status(doc: dict[str, Any], out: TextIO = sys.stdout) -> None:
    alive = pid_alive(doc.get("pid"))
    state = doc.get("state", "?") if alive or doc.get("state") == "stopped" else f"{doc.get('state')} (not running)"
    print(f"stack    {state}  pid {doc.get('pid')}  nats {doc.get('nats_url')}", file=out)
    print(f"{'service':<16}{'state':<12}{'pid':>8}{'restarts':>10}  last exit", file=out)
    for tag, s in doc.get("services", {}).items():
        last = describe_exit(s["last_exit"]) if s.get("last_exit") is not None else "-"
        print(f"{tag:<16}{s.get('state', '?'):<12}{s.get('pid') or '-':>8}{s.get('restarts', 0):>10}  {last}", file=out)
