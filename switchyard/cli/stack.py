"""Start every service as its own process against one NATS server; used by `make run` and the e2e tests.

With `supervise=True` (what `switchyard run` uses) a service that exits without being asked to is
started again after a growing delay (`Backoff`); each restart is a JSON line in `logs/supervisor.log`
and is counted in `stack.json`, which `switchyard status` prints. Nothing is restarted once `stop()`
(or `request_stop()`, which a signal handler may call) has begun."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from switchyard import CHECKOUT
from switchyard.cli.health import wait_pools_live, wait_stages_ready
from switchyard.cli.pools import PoolManager
from switchyard.cli.supervise import Backoff, ServiceStatus, StopLatch, SupervisorLog, describe_exit, write_status
from switchyard.libs.bus.embedded import NatsServer, free_port, start_nats_server
from switchyard.libs.models import ModelRegistry

# Start order: consumers of the log and the pipeline's back half first, the gateway last, so the
# gateway's readiness probe finds everyone.
SERVICES = ("logger", "context", "safety_in", "router", "tools", "inference", "safety_out", "gateway")
# The bus's own entry in the status file and the supervisor's log.
BUS = "nats-server"


class StackStopping(Exception):
    """The stack was asked to stop while it was still starting."""


def dev_key(data_dir: Path, given: str, file_name: str, prefix: str) -> str:
    """The key given (from the settings), else the one saved by an earlier run, else a new one saved now."""
    if given:
        return given
    path = data_dir / file_name
    if path.exists():
        return path.read_text().strip()
    key = f"{prefix}-{secrets.token_urlsafe(24)}"
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


@dataclass
class _Spec:
    """How a service was started, so the supervisor can start it again alike."""

    name: str
    env: dict[str, str]
    replica: str | None
    # The inference engine kind a pool runs, where its interpreter is its own (`interpreters`).
    engine: str | None = None


@dataclass
class Stack:
    data_dir: Path
    port: int = 8000
    env: dict[str, str] = field(default_factory=dict)
    nats_url: str | None = None
    log_to_files: bool = True
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nats: NatsServer | None = None
    # The fsync interval of the nats-server the stack starts (`always`, a duration, or None: the server's).
    nats_sync_interval: str | None = "always"
    # Given keys are used as they are; empty ones are the saved keys of an earlier run (or new ones), set by start().
    api_key: str = ""
    admin_key: str = ""
    metrics_port: int = 0
    # The /metrics port of each inference process started as a replica (`inference-<replica>`), by tag.
    replica_metrics_ports: dict[str, int] = field(default_factory=dict)
    # The environment every service was started with, so one can be restarted alike.
    service_env: dict[str, str] = field(default_factory=dict)
    # Which services to start; a stack without the gateway is ready when each answers its health subject.
    services: tuple[str, ...] = SERVICES
    supervise: bool = False
    backoff: Backoff = field(default_factory=Backoff)
    echo_events: bool = False
    # The python a service runs with, where not this one's, by service name or `inference:<engine>`: a vLLM
    # pool runs from vLLM's own virtualenv (`make setup-vllm`), which holds our dependencies but not this
    # package, so such a process gets PYTHONPATH at the checkout this package runs from.
    interpreters: dict[str, str] = field(default_factory=dict)
    # Registry models (switchyard/libs/models) served by an inference pool of their own beside the default model's,
    # each one process `inference-<pool>` with SWITCHYARD_INFERENCE_MODEL=<name>; `run` serves every model.
    pools: dict[str, str] = field(default_factory=dict)  # model name -> its pool
    # The registry the stack writes into the bus's key-value store at start (switchyard/libs/models/live.py);
    # None: the one SWITCHYARD_MODELS (in `env`, else this process's environment) describes. A stack that
    # runs inference also answers `/v1/admin/models`' requests to start and stop pools (switchyard/cli/pools.py).
    registry: ModelRegistry | None = None
    manage_pools: bool = True
    pool_manager: PoolManager | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _changed: threading.Condition = field(init=False, repr=False)
    _stop: StopLatch = field(default_factory=StopLatch, repr=False)
    _supervising: bool = field(default=False, repr=False)
    _specs: dict[str, _Spec] = field(default_factory=dict, repr=False)
    _status: dict[str, ServiceStatus] = field(default_factory=dict, repr=False)
    _watchers: list[threading.Thread] = field(default_factory=list, repr=False)
    _state: str = field(default="starting", repr=False)
    _log: SupervisorLog | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def status_path(self) -> Path:
        return self.data_dir / "stack.json"

    @property
    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {tag: s.restarts for tag, s in self._status.items()}

    def start(self, timeout_s: float = 300.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self._log = SupervisorLog(
            self.data_dir / "logs" / "supervisor.log" if self.log_to_files else None,
            sys.stderr if self.echo_events else None,
        )
        self.api_key = dev_key(self.data_dir, self.api_key, "dev-api-key", "sy")
        self.admin_key = dev_key(self.data_dir, self.admin_key, "admin-api-key", "sy-admin")
        self.metrics_port = int(self.env.get("SWITCHYARD_INFERENCE_METRICS_PORT", free_port()))
        if not self.nats_url:
            self.nats = start_nats_server(store_dir=str(self.data_dir / "nats"), sync_interval=self.nats_sync_interval)
            self.nats_url = self.nats.url
            self._status[BUS] = ServiceStatus(pid=self.nats.proc.pid, state="running", started_at=time.time())
            self._status[BUS].started_mono = time.monotonic()
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
        if self.manage_pools and "inference" in self.services:
            # Before any service: they read the registry from the bucket this writes.
            registry = self.registry or _registry_from(env)
            self.pool_manager = PoolManager(self, registry, int(env.get("NATS_REPLICAS", "1")))
            self.pool_manager.start()
        for name in self.services:
            if self._stop.is_set():
                raise StackStopping("asked to stop while starting")
            self.start_service(name, env)
            if name == "inference":
                for model, pool in self.pools.items():
                    card = self.registry.find(model) if self.registry else None
                    engine = card.engine if card else None
                    self.start_service(name, {**env, "SWITCHYARD_INFERENCE_MODEL": model}, pool, engine)
        self.wait_ready(timeout_s)
        with self._lock:
            self._state = "ready"
            if self.supervise:
                self._supervising = True
                for tag, proc in self.procs.items():
                    self._watch(tag, proc)
                if self.nats is not None:
                    self._watch_bus(self.nats)
            self._write_status()

    def start_service(
        self, name: str, env: dict[str, str], replica: str | None = None, engine: str | None = None
    ) -> subprocess.Popen[bytes]:
        tag = f"{name}-{replica}" if replica else name
        with self._lock:
            self._specs[tag] = _Spec(name, env, replica, engine)
            proc = self._spawn(tag)
            status = self._status.setdefault(tag, ServiceStatus())
            status.attempt = 0
            if self._supervising:
                self._watch(tag, proc)
            self._write_status()
        return proc

    def _spawn(self, tag: str) -> subprocess.Popen[bytes]:
        spec = self._specs[tag]
        # The service stops when this process is gone, however it went (runner.stop_on_signals).
        env = {**spec.env, "SWITCHYARD_SUPERVISOR_PID": str(os.getpid())}
        out = open(self.data_dir / "logs" / f"{tag}.log", "ab") if self.log_to_files else None
        if spec.replica:
            env = {**env, f"SWITCHYARD_{spec.name.upper()}_REPLICA": spec.replica}
            if spec.name == "inference":  # each replica serves its own /metrics
                self.replica_metrics_ports[tag] = free_port()
                env["SWITCHYARD_INFERENCE_METRICS_PORT"] = str(self.replica_metrics_ports[tag])
        python = self.interpreters.get(spec.name, sys.executable)
        if spec.engine and f"{spec.name}:{spec.engine}" in self.interpreters:
            python = self.interpreters[f"{spec.name}:{spec.engine}"]
            paths = (str(CHECKOUT), env.get("PYTHONPATH"))
            env = {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        try:
            proc = subprocess.Popen(
                [python, "-m", f"switchyard.services.{spec.name}"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
            )
        finally:
            if out is not None:
                out.close()  # the child holds its own copy
        self.procs[tag] = proc
        status = self._status.setdefault(tag, ServiceStatus())
        status.pid, status.state = proc.pid, "running"
        status.started_at, status.started_mono = time.time(), time.monotonic()
        return proc

    def _exited(self, tag: str, code: int) -> tuple[ServiceStatus, float]:
        """Record that `tag` (a service or the bus) exited unasked; the backoff before its successor. Under the lock."""
        status = self._status[tag]
        uptime = time.monotonic() - status.started_mono
        status.attempt = self.backoff.next_attempt(status.attempt, uptime)
        status.state, status.last_exit, status.pid = "restarting", code, None
        delay = self.backoff.delay(status.attempt)
        self._event(
            "restart",
            service=tag,
            exit_code=code,
            exit=describe_exit(code),
            attempt=status.attempt,
            delay_s=delay,
            uptime_s=round(uptime, 1),
        )
        self._write_status()
        self._changed.notify_all()
        return status, delay

    def _watch(self, tag: str, proc: subprocess.Popen[bytes]) -> None:
        t = threading.Thread(target=self._supervise, args=(tag, proc), name=f"supervise-{tag}", daemon=True)
        self._watchers.append(t)
        t.start()

    def _supervise(self, tag: str, proc: subprocess.Popen[bytes]) -> None:
        """Waits on one process; when it exits unasked, starts its successor after the backoff, and waits on that."""
        while True:
            code = proc.wait()
            with self._lock:
                if self._stop.is_set() or self.procs.get(tag) is not proc:
                    return  # stopped or replaced on purpose
                status, delay = self._exited(tag, code)
            if self._stop.wait(delay):
                return
            with self._lock:
                if self._stop.is_set() or self.procs.get(tag) is not proc:
                    return
                proc = self._spawn(tag)
                status.restarts += 1
                self._event("restarted", service=tag, pid=proc.pid, restarts=status.restarts)
                self._write_status()
                self._changed.notify_all()

    def _watch_bus(self, server: NatsServer) -> None:
        t = threading.Thread(target=self._supervise_bus, args=(server,), name="supervise-nats", daemon=True)
        self._watchers.append(t)
        t.start()

    def _supervise_bus(self, server: NatsServer) -> None:
        """The bus is supervised like every service: when its server dies unasked, a new one is started on
        the same port with the same store after the backoff. The services reconnect to it by themselves
        (they retry forever), and nats-py re-subscribes what they had."""
        while True:
            code = server.proc.wait()
            with self._lock:
                if self._stop.is_set() or self.nats is not server:
                    return
                status, delay = self._exited(BUS, code)
            if self._stop.wait(delay):
                return
            with self._lock:
                if self._stop.is_set() or self.nats is not server:
                    return
                try:
                    server.restart()
                except RuntimeError as e:
                    # Counted as a quick exit: the next try waits longer.
                    self._event("restart_failed", service=BUS, error=str(e))
                    status.started_mono = time.monotonic()
                    continue
                status.pid, status.state = server.proc.pid, "running"
                status.started_at, status.started_mono = time.time(), time.monotonic()
                status.restarts += 1
                self._event("restarted", service=BUS, pid=server.proc.pid, restarts=status.restarts)
                self._write_status()
                self._changed.notify_all()

    def exit_code(self, tag: str) -> int | None:
        """How `tag`'s process ended, when it has (under supervision: its last exit, though it restarts)."""
        with self._lock:
            proc, status = self.procs.get(tag), self._status.get(tag)
            if status is not None and status.state == "restarting":
                return status.last_exit
            return None if proc is None else proc.poll()

    def last_exit(self, tag: str) -> int | None:
        with self._lock:
            status = self._status.get(tag)
            return None if status is None else status.last_exit

    def wait_restarted(self, tag: str, restarts: int, timeout_s: float) -> subprocess.Popen[bytes]:
        """Until the supervisor has started `tag` (a service, or `nats-server`) `restarts` times; its current
        process."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._status[tag].restarts >= restarts, timeout_s):
                raise TimeoutError(f"{tag} was not restarted {restarts} time(s) within {timeout_s}s")
            if tag == BUS and self.nats is not None:
                return self.nats.proc
            return self.procs[tag]

    def _check_alive(self) -> None:
        if self._stop.is_set():
            raise StackStopping("asked to stop while starting")
        with self._lock:
            for tag, p in self.procs.items():
                if p.poll() is not None and not self._supervising:
                    raise RuntimeError(f"service {tag} exited with {p.returncode}; see {self.data_dir}/logs/{tag}.log")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if self.pools and "inference" in self.services:
            # One pool per model: ready once each has a live replica (the default model's pool included).
            assert self.nats_url is not None
            pools = {*self.pools.values(), self.service_env.get("SWITCHYARD_INFERENCE_POOL", "default")}
            wait_pools_live(self.nats_url, pools, timeout_s, self._check_alive)
        if "gateway" not in self.services:
            assert self.nats_url is not None
            wait_stages_ready(
                self.nats_url, list(self.services), max(deadline - time.monotonic(), 1.0), self._check_alive
            )
            return
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                r = httpx.get(f"{self.url}/readyz", timeout=3)
                if r.status_code == 200:
                    return
                last = r.text
            except httpx.HTTPError as e:
                last = str(e)
            if self._stop.wait(0.5):
                raise StackStopping("asked to stop while starting")
        raise TimeoutError(f"the stack was not ready within {timeout_s}s: {last}")

    def wait_stop_requested(self, timeout_s: float | None = None) -> bool:
        return self._stop.wait(timeout_s)

    def request_stop(self) -> None:
        """Safe from a signal handler: takes no lock; `stop()` does the work."""
        self._stop.set()

    def stop_service(self, tag: str, timeout_s: float = 20.0) -> None:
        with self._lock:
            p = self.procs.pop(tag)
            if tag in self._status:
                self._status[tag].state, self._status[tag].pid = "stopped", None
        _terminate(p, timeout_s)
        with self._lock:
            if tag in self._status and p.returncode is not None:
                self._status[tag].last_exit = p.returncode
            self._write_status()

    def restart_service(self, name: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Stop one service (if running) and start it again with the stack's environment."""
        if name in self.procs:
            self.stop_service(name)
        return self.start_service(name, {**self.service_env, **(extra_env or {})})

    def stop(self) -> None:
        self._stop.set()  # first: from here on nothing is restarted
        if self.pool_manager is not None:  # nor started for the admin API
            self.pool_manager.stop()
            self.pool_manager = None
        with self._lock:
            self._state = "stopping"
            self._write_status()
            tags = list(self.procs)
            # Reverse order: the gateway stops taking requests before the stages behind it go.
            for tag in reversed(tags):
                p = self.procs[tag]
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        for tag in tags:
            self.stop_service(tag)
        for t in self._watchers:
            t.join(5)
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
            if BUS in self._status:
                self._status[BUS].state, self._status[BUS].pid = "stopped", None
        with self._lock:
            self._state = "stopped"
            self._write_status()

    def _event(self, event: str, **fields: Any) -> None:
        if self._log is not None:
            self._log(event, **fields)

    def _write_status(self) -> None:
        if not self.data_dir.exists():
            return
        write_status(
            self.status_path,
            {
                "pid": os.getpid(),
                "state": self._state,
                "supervise": self.supervise,
                "url": self.url if "gateway" in self.services else None,
                "nats_url": self.nats_url,
                "nats_pid": self.nats.proc.pid if self.nats is not None else None,
                "services": {tag: s.public() for tag, s in self._status.items()},
            },
        )


def _registry_from(env: dict[str, str]) -> ModelRegistry:
    """The registry the services started with `env` read (its SWITCHYARD_MODELS, ... over this process's)."""
    names = {"SWITCHYARD_MODELS": "models", "SWITCHYARD_DEFAULT_MODEL": "default_model"}
    names["SWITCHYARD_MODEL_FALLBACKS"] = "model_fallbacks"
    given = {field_name: env[var] for var, field_name in names.items() if var in env}
    if not given:
        return ModelRegistry()
    # Complex fields come as JSON, as pydantic-settings reads them from the environment.
    parsed = {k: (v if k == "default_model" else json.loads(v)) for k, v in given.items()}
    return ModelRegistry.model_validate(parsed)


def _terminate(p: subprocess.Popen[bytes], timeout_s: float) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
