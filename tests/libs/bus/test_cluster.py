"""The bus on a 3-node NATS cluster: one comma-separated URL, the log stream and buckets kept on every
node, and a durable publish that outlives the death of the log's leader node."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from libs.bus import Bus
from libs.bus.cluster import NatsCluster, start_nats_cluster
from libs.telemetry import setup_tracing
from schemas import subjects


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
        got = await kv.get("k")
        assert got is not None and got.n == 1
    finally:
        await bus.close()
