"""Start every service as its own process against one NATS server; used by `make run` and the e2e tests."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from libs.bus.embedded import NatsServer, free_port, start_nats_server

# Start order: consumers of the log and the pipeline's back half first, the gateway last, so the
# gateway's readiness probe finds everyone.
SERVICES = ("logger", "context", "safety_in", "router", "tools", "inference", "safety_out", "gateway")


def dev_key(data_dir: Path, env_name: str, file_name: str, prefix: str) -> str:
    """The key from the environment, else the one saved by an earlier run, else a new one saved now."""
    if os.environ.get(env_name):
        return os.environ[env_name]
    path = data_dir / file_name
    if path.exists():
        return path.read_text().strip()
    key = f"{prefix}-{secrets.token_urlsafe(24)}"
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


@dataclass
class Stack:
    data_dir: Path
    port: int = 8000
    env: dict[str, str] = field(default_factory=dict)
    nats_url: str | None = None
    log_to_files: bool = True
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nats: NatsServer | None = None
    api_key: str = ""
    admin_key: str = ""
    metrics_port: int = 0
    # The environment every service was started with, so one can be restarted alike.
    service_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self.api_key = dev_key(self.data_dir, "SWITCHYARD_API_KEY", "dev-api-key", "sy")
        self.admin_key = dev_key(self.data_dir, "SWITCHYARD_ADMIN_KEY", "admin-api-key", "sy-admin")
        self.metrics_port = int(self.env.get("SWITCHYARD_INFERENCE_METRICS_PORT", free_port()))
        if not self.nats_url:
            self.nats = start_nats_server(store_dir=str(self.data_dir / "nats"))
            self.nats_url = self.nats.url
        env = {
            **os.environ,
            "NATS_URL": self.nats_url,
            "SWITCHYARD_DATA_DIR": str(self.data_dir),
            "SWITCHYARD_PORT": str(self.port),
            "SWITCHYARD_API_KEY": self.api_key,
            "SWITCHYARD_ADMIN_KEY": self.admin_key,
            "SWITCHYARD_INFERENCE_METRICS_PORT": str(self.metrics_port),
            **self.env,
        }
        self.service_env = env
        for name in SERVICES:
            self.start_service(name, env)
        self.wait_ready(timeout_s)

    def start_service(self, name: str, env: dict[str, str], replica: str | None = None) -> subprocess.Popen[bytes]:
        tag = f"{name}-{replica}" if replica else name
        out = open(self.data_dir / "logs" / f"{tag}.log", "ab") if self.log_to_files else None
        if replica:
            env = {**env, f"SWITCHYARD_{name.upper()}_REPLICA": replica}
            if name == "inference":  # each replica serves its own /metrics
                env["SWITCHYARD_INFERENCE_METRICS_PORT"] = str(free_port())
        proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"], env=env, stdout=out, stderr=subprocess.STDOUT if out else None
        )
        self.procs[tag] = proc
        return proc

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for tag, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"service {tag} exited with {p.returncode}; see {self.data_dir}/logs/{tag}.log")
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=3)
                if r.status_code == 200:
                    return
                last = r.text
            except httpx.HTTPError as e:
                last = str(e)
            time.sleep(0.5)
        raise TimeoutError(f"the stack was not ready within {timeout_s}s: {last}")

    def stop_service(self, tag: str, timeout_s: float = 20.0) -> None:
        p = self.procs.pop(tag)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def restart_service(self, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Stop one service (if running) and start it again with the stack's environment."""
        if name in self.procs:
            self.stop_service(name)
        return self.start_service(name, {**self.service_env, **(extra_env or {})})

    def stop(self) -> None:
        # Reverse order: the gateway stops taking requests before the stages behind it go.
        for tag in reversed(list(self.procs)):
            p = self.procs[tag]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for tag in list(self.procs):
            self.stop_service(tag)
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
