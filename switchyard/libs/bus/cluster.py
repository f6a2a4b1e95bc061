"""A private NATS cluster on loopback (JetStream on every node, routes between them) for the scale-out test.

Each node gets its own config file, store and monitoring port; the cluster is ready once every node's
`/healthz` says JetStream is current, i.e. a meta leader is elected and each node has caught up."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.libs.bus.embedded import free_port, nats_binary


@dataclass
class ClusterNode:
    name: str
    port: int
    route_port: int
    monitor_port: int
    store_dir: str
    config: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.config.with_suffix(".log"), "ab")
        try:
            self.proc = subprocess.Popen([nats_binary(), "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=1) as r:
                return bool(json.load(r).get("status") == "ok")
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        """SIGKILL: the node vanishes as in a crash, with no goodbye to its routes or clients."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class NatsCluster:
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated, as NATS_URL takes it (clients fail over among them)."""
        return ",".join(n.url for n in self.nodes)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise NodeExited(f"nats node {n.name} exited with {n.proc.returncode}; see {n.config}.log")
            if all(n.healthy() for n in self.nodes if n.proc is not None and n.proc.poll() is None):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the NATS cluster was not healthy within {timeout_s}s")

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


def _config(node: ClusterNode, peers: list[ClusterNode], cluster_name: str) -> str:
    routes = ", ".join(f"nats-route://127.0.0.1:{p.route_port}" for p in peers)
    return f"""server_name: {node.name}
listen: 127.0.0.1:{node.port}
http: 127.0.0.1:{node.monitor_port}
jetstream {{
  store_dir: "{node.store_dir}"
}}
cluster {{
  name: {cluster_name}
  listen: 127.0.0.1:{node.route_port}
  routes: [{routes}]
}}
"""


def start_nats_cluster(
    size: int = 3, base_dir: str | None = None, cluster_name: str = "switchyard", timeout_s: float = 60.0
) -> NatsCluster:
    base = Path(base_dir or tempfile.mkdtemp(prefix="switchyard-nats-cluster-"))
    # A port found free can be taken by another process before the node binds it (the node then
    # exits at once): start again on fresh ports, twice more, before giving up. A retry gets a fresh
    # store: the stopped nodes' JetStream state names the old routes.
    for attempt in range(2):
        with contextlib.suppress(NodeExited):
            return _start(size, base / f"retry{attempt}" if attempt else base, cluster_name, timeout_s)
    return _start(size, base / "retry2", cluster_name, timeout_s)


class NodeExited(RuntimeError):
    """A node's process ended while the cluster was starting."""


def _start(size: int, base: Path, cluster_name: str, timeout_s: float) -> NatsCluster:
    base.mkdir(parents=True, exist_ok=True)
    cluster = NatsCluster()
    for i in range(size):
        name = f"n{i + 1}"
        store = base / name
        store.mkdir(exist_ok=True)
        cluster.nodes.append(
            ClusterNode(name, free_port(), free_port(), free_port(), str(store), base / f"{name}.conf")
        )
    for node in cluster.nodes:
        node.config.write_text(_config(node, [p for p in cluster.nodes if p is not node], cluster_name))
    try:
        for node in cluster.nodes:
            node.start()
        cluster.wait_healthy(timeout_s)
    except Exception:
        cluster.stop()
        raise
    return cluster
