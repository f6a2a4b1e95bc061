"""The bus on a 3-node NATS cluster: one comma-separated URL, the log stream and buckets kept on every
node, and a durable publish that outlives the death of the log's leader node."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from switchyard.libs.bus import Bus
from switchyard.libs.bus import cluster as cluster_module
from switchyard.libs.bus.cluster import ClusterNode, NatsCluster, start_nats_cluster
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import subjects
from tests.wait import wait_for


class Note(BaseModel):
    n: int


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    c = start_nats_cluster(3, base_dir=str(tmp_path / "nats"))
    yield c
    c.stop()


async def test_the_log_survives_its_leader_node(cluster: NatsCluster) -> None:
    assert cluster.url.count(",") == 2
    bus = await Bus.connect(cluster.url, "test", uuid.uuid4().hex[:6], setup_tracing("test"), js_replicas=3)
    try:
        await bus.ensure_log_stream()
        kv = await bus.kv("test_bucket", Note)
        assert (await bus.js.stream_info("KV_test_bucket")).config.num_replicas == 3
        info = await bus.js.stream_info(subjects.LOG_STREAM)
        assert info.config.num_replicas == 3 and info.cluster is not None
        leader = next(n for n in cluster.nodes if n.name == info.cluster.leader)
        await kv.put("k", Note(n=1))

        leader.kill()
        # Sent while the stream elects a new leader (and perhaps while this client reconnects), under
        # one message id twice: kept, and kept once.
        subject = subjects.log_stage("test")
        await bus.publish_durable(subject, Note(n=2), "one-id")
        await bus.publish_durable(subject, Note(n=2), "one-id")
        after = await bus.js.stream_info(subjects.LOG_STREAM)
        assert after.cluster is not None and after.cluster.leader != leader.name
        assert after.state.messages == 1
        # The bucket is a stream of its own; its leader may have been the killed node too, and a read
        # waits for its election (under load that took longer than one request's timeout: ci5).
        await _new_leader(bus, "KV_test_bucket", leader.name)
        got = await kv.get("k")
        assert got is not None and got.n == 1
    finally:
        await bus.close()


async def _new_leader(bus: Bus, stream: str, gone: str, timeout_s: float = 60.0) -> None:
    """Returns once `stream` has a leader other than `gone` (asking again while it elects one)."""

    async def elected() -> bool:
        info = await bus.js.stream_info(stream)
        return info.cluster is not None and info.cluster.leader not in (None, gone)

    await wait_for(elected, timeout_s, f"{stream} to elect a new leader", 0.2, ignore=(Exception,))


def _consumer_node(cluster: NatsCluster, stream: str) -> ClusterNode:
    """The node holding the (single) consumer on `stream`: the one whose monitoring endpoint lists it."""
    for node in cluster.nodes:
        url = f"http://127.0.0.1:{node.monitor_port}/jsz?accounts=true&streams=true&consumers=true"
        with urllib.request.urlopen(url, timeout=5) as r:
            jsz = json.load(r)
        for account in jsz.get("account_details") or []:
            for s in account.get("stream_detail") or []:
                if s["name"] == stream and s.get("consumer_detail"):
                    leader = s["consumer_detail"][0]["cluster"]["leader"]
                    return next(n for n in cluster.nodes if n.name == leader)
    raise AssertionError(f"no consumer on {stream}")


async def test_a_watch_hears_on_after_the_node_of_its_consumer_dies(cluster: NatsCluster) -> None:
    watcher = await Bus.connect(cluster.url, "test", uuid.uuid4().hex[:6], setup_tracing("test"), js_replicas=3)
    writer = await Bus.connect(cluster.url, "test", uuid.uuid4().hex[:6], setup_tracing("test"), js_replicas=3)
    try:
        heard: asyncio.Queue[tuple[str, Note | None]] = asyncio.Queue()

        async def on_change(key: str, value: Note | None) -> None:
            await heard.put((key, value))

        kv_w = await watcher.kv("watched", Note)
        kv_p = await writer.kv("watched", Note)
        await kv_p.put("a", Note(n=0))
        await kv_w.watch(on_change)
        assert await asyncio.wait_for(heard.get(), 10) == ("a", Note(n=0))
        _consumer_node(cluster, "KV_watched").kill()
        # Writes go on (as an inference replica's heartbeats do) until the watch hears one again.
        n = 0
        while True:
            n += 1
            assert n < 60, "the watch never heard another value"
            with contextlib.suppress(Exception):  # the bucket elects a leader of its own meanwhile
                await kv_p.put("a", Note(n=n))
            with contextlib.suppress(TimeoutError):
                _, value = await asyncio.wait_for(heard.get(), 0.5)
                if value is not None and value.n > 0:
                    break
        await kv_p.delete("a")
        while (got := await asyncio.wait_for(heard.get(), 10)) != ("a", None):
            assert got[0] == "a"
    finally:
        await watcher.close()
        await writer.close()


def test_a_node_whose_port_was_taken_meanwhile_starts_again_on_fresh_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process holds the first port handed out, as when it binds between free_port and the node.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    held = taken.getsockname()[1]
    ports = iter([held])
    real = cluster_module.free_port
    monkeypatch.setattr(cluster_module, "free_port", lambda: next(ports, None) or real())
    try:
        c = start_nats_cluster(3, base_dir=str(tmp_path / "nats"))
    finally:
        taken.close()
    try:
        assert held not in {n.port for n in c.nodes}
        assert all(n.proc is not None and n.proc.poll() is None for n in c.nodes)
        assert (tmp_path / "nats" / "retry1").is_dir()  # the second attempt, on its own store
    finally:
        c.stop()
