"""Supervision against real processes: a small stack (nats-server and the logger, the quickest service to
start) whose service is killed, and `python -m switchyard.cli run` stopped by a signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from switchyard.cli.stack import BUS, Stack
from switchyard.cli.supervise import Backoff, pid_alive, read_status
from switchyard.libs.bus.embedded import free_port, start_nats_server

ROOT = Path(__file__).resolve().parents[2]


def _events(stack: Stack, event: str) -> list[dict[str, Any]]:
    lines = (stack.data_dir / "logs" / "supervisor.log").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == event]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(
        data_dir=tmp_path / "var",
        services=("logger",),
        supervise=True,
        backoff=Backoff(initial_s=0.2, cap_s=5, reset_after_s=600),
    )
    try:
        s.start(timeout_s=120)
        yield s
    finally:
        s.stop()


def test_a_killed_service_is_restarted_counted_and_logged(stack: Stack) -> None:
    first = stack.procs["logger"]
    os.kill(first.pid, signal.SIGKILL)
    second = stack.wait_restarted("logger", 1, timeout_s=60)
    assert second.pid != first.pid and first.returncode == -signal.SIGKILL
    stack.wait_ready(60)  # the new process answers its health subject
    assert second.poll() is None

    # Killed again at once: the same run of failures, so the delay doubles.
    os.kill(second.pid, signal.SIGKILL)
    third = stack.wait_restarted("logger", 2, timeout_s=60)
    stack.wait_ready(60)
    assert third.poll() is None

    restarts = _events(stack, "restart")
    assert [(e["service"], e["exit_code"], e["attempt"], e["delay_s"]) for e in restarts] == [
        ("logger", -9, 1, 0.2),
        ("logger", -9, 2, 0.4),
    ]
    assert stack.restarts["logger"] == 2
    status = read_status(stack.status_path)
    assert status is not None and status["state"] == "ready"
    assert status["services"]["logger"] == {**status["services"]["logger"], "restarts": 2, "pid": third.pid}


def test_a_killed_nats_server_is_restarted_in_place_and_the_services_reconnect(stack: Stack) -> None:
    """The bus is supervised like a service: a new server on the same port with the same store, and the
    logger (which keeps a durable JetStream consumer) answers its health subject again without a restart."""
    nats = stack.nats
    assert nats is not None
    first, port, store = nats.proc, nats.port, nats.store_dir
    logger = stack.procs["logger"]
    os.kill(first.pid, signal.SIGKILL)
    second = stack.wait_restarted(BUS, 1, timeout_s=60)
    assert second.pid != first.pid and first.returncode == -signal.SIGKILL
    assert (nats.port, nats.store_dir) == (port, store)
    stack.wait_ready(60)  # the logger reconnected and answers on the new server
    assert logger.poll() is None and stack.procs["logger"] is logger  # the same process: it reconnected
    assert [(e["service"], e["exit_code"]) for e in _events(stack, "restart")] == [(BUS, -9)]
    status = read_status(stack.status_path)
    assert status is not None and status["nats_pid"] == second.pid
    assert status["services"][BUS] == {**status["services"][BUS], "restarts": 1, "state": "running"}


def test_the_stack_server_syncs_as_configured(tmp_path: Path) -> None:
    """The server the stack writes a config for fsyncs each write (`always`), as its /varz reports."""
    monitor = free_port()
    server = start_nats_server(store_dir=str(tmp_path / "nats"), sync_interval="always", monitor_port=monitor)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as r:
            config = json.load(r)["jetstream"]["config"]
        assert config["sync_always"] is True
    finally:
        server.stop()


def test_stopping_restarts_nothing(stack: Stack) -> None:
    proc = stack.procs["logger"]
    nats = stack.nats
    assert nats is not None
    stack.stop()
    assert proc.returncode is not None and nats.proc.returncode is not None
    assert not stack.procs
    assert stack.restarts["logger"] == 0
    assert not (stack.data_dir / "logs" / "supervisor.log").exists() or not _events(stack, "restart")
    status = read_status(stack.status_path)
    assert status is not None and status["state"] == "stopped"
    assert status["services"]["logger"]["state"] == "stopped"


def _run_cli(data_dir: Path, services: str, ignore_sigint: bool) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    env = {**os.environ, "SWITCHYARD_DATA_DIR": str(data_dir)}
    env.pop("NATS_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchyard.cli", "run", "--services", services],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # What a shell does to a background job (`make run &`): SIGINT starts out ignored.
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # blocks until the stack says it is ready (or exits)
        lines.append(line)
        if line.startswith("ready:"):
            break
    else:
        proc.wait()
        pytest.fail("".join(lines))
    status = read_status(data_dir / "stack.json")
    assert status is not None and status["pid"] == proc.pid and status["state"] == "ready"
    return proc, status


@pytest.mark.parametrize(
    ("sig", "services", "ignore_sigint"),
    [(signal.SIGTERM, "logger,context", False), (signal.SIGINT, "logger", True)],
    ids=["SIGTERM", "SIGINT-in-background"],
)
def test_a_signal_to_cli_run_stops_every_child(
    tmp_path: Path, sig: signal.Signals, services: str, ignore_sigint: bool
) -> None:
    proc, status = _run_cli(tmp_path / "var", services, ignore_sigint)
    assert status["services"][BUS]["pid"] == status["nats_pid"]
    children = [status["nats_pid"], *(s["pid"] for tag, s in status["services"].items() if tag != BUS)]
    assert len(children) == 1 + len(services.split(",")) and all(map(pid_alive, children))
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "stopped." in out
    assert not any(map(pid_alive, children)), out
    final = read_status(tmp_path / "var" / "stack.json")
    assert final is not None and final["state"] == "stopped"
    assert all(s["restarts"] == 0 and s["state"] == "stopped" for s in final["services"].values())
    assert '"restart"' not in out
