"""Scale-out, shown: a 3-node NATS cluster on loopback with two replicas of every stage. Under a load of
concurrent streams one NATS node (the LOG stream's leader) and one replica of each stage are killed
with SIGKILL, and nothing is lost: every request ends with `done` or a clean `error` event, long
before its deadline, and has exactly one record in the logger. A second wave sent right after the
kills is served by what is left.

The gateway runs twice as well (half the load each) but is not killed: a client's TCP connection
ends with its gateway, which is the load balancer's business, not the pipeline's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.cli.stack import SERVICES, Stack
from switchyard.libs.bus import Bus, BusError
from switchyard.libs.bus.cluster import ClusterNode, NatsCluster, start_nats_cluster
from switchyard.libs.bus.embedded import free_port
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, subjects
from tests.e2e.sse import Event, events
from tests.wait import WaitTimeout, wait_for, wait_until

pytestmark = pytest.mark.e2e

WAVE1 = 12  # in flight when the kills land
WAVE2 = 4  # sent right after them
MAX_TOKENS = 64
PROMPT = "Tell a long story about a lighthouse keeper and the ship number {i}."
# The request deadline is 120 s; a request that has not ended this long after the kills was waited out.
ENDED_WITHIN_S = 60.0
STAGES = [s for s in SERVICES if s != "gateway"]


@dataclass
class Outcome:
    wave: int
    rid: str = ""
    status: int = 0
    events: list[Event] = field(default_factory=list)
    deltas: int = 0
    first_delta_at: float | None = None  # monotonic
    ended_at: float | None = None  # monotonic
    broken: str = ""  # the HTTP stream broke off without a terminal event

    @property
    def terminal(self) -> Event | None:
        last = self.events[-1] if self.events else None
        return last if last is not None and last.event in ("done", "error") else None


@dataclass
class Load:
    """Streams running in threads; `progress` is notified at every event so the test waits on events."""

    progress: threading.Condition = field(default_factory=threading.Condition)
    outcomes: list[Outcome] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, clients: list[httpx.Client], wave: int, n: int, tag: str) -> None:
        for i in range(n):
            out = Outcome(wave)
            self.outcomes.append(out)
            client = clients[i % len(clients)]
            body = {
                "chatId": f"so-{tag}-{wave}-{i}",
                "text": PROMPT.format(i=i),
                "temperature": 0,
                "max_tokens": MAX_TOKENS,
            }
            t = threading.Thread(target=self._stream, args=(client, body, out), daemon=True)
            self.threads.append(t)
            t.start()

    def _stream(self, client: httpx.Client, body: dict[str, Any], out: Outcome) -> None:
        try:
            with client.stream("POST", "/chat", json=body) as r:
                out.status, out.rid = r.status_code, r.headers.get("x-request-id", "")
                if r.status_code != 200:
                    r.read()
                    out.events.append(Event("http", r.json()))
                    return
                for ev in events(r):
                    with self.progress:
                        out.events.append(ev)
                        if ev.event == "delta":
                            out.deltas += 1
                            out.first_delta_at = out.first_delta_at or time.monotonic()
                        self.progress.notify_all()
                    if ev.event in ("done", "error"):
                        break
        except httpx.HTTPError as e:
            out.broken = f"{type(e).__name__}: {e}"
        finally:
            with self.progress:
                out.ended_at = time.monotonic()
                self.progress.notify_all()

    def wait(self, condition: Any, timeout_s: float) -> bool:
        with self.progress:
            return bool(self.progress.wait_for(condition, timeout_s))


async def _replicas_answer(nats_url: str, stages: list[str], replica: str, timeout_s: float) -> None:
    bus = await Bus.connect(nats_url, "test", uuid.uuid4().hex[:6], setup_tracing("test"))
    try:
        missing = list(stages)

        async def all_answered() -> bool:
            for stage in list(missing):
                try:
                    await bus.request(subjects.health_of(stage, replica), HealthRequest(), HealthReply, timeout=1.0)
                    missing.remove(stage)
                except BusError:
                    pass
            return not missing

        await wait_for(all_answered, timeout_s, f"replicas {replica} of {missing} to answer", 0.5)
    finally:
        await bus.close()


def _wait_http_ready(url: str, timeout_s: float) -> None:
    def ready() -> bool:
        return httpx.get(f"{url}/readyz", timeout=3).status_code == 200

    wait_until(ready, timeout_s, f"{url} to be ready", 0.5, ignore=(httpx.HTTPError,))


def _monitor(node: ClusterNode, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor_port}{path}", timeout=5) as r:
        return json.load(r)


def _log_leader(cluster: NatsCluster) -> str:
    """The LOG stream's leader, once every stream the pipeline needs is kept on all three nodes."""
    jsz = _monitor(cluster.nodes[0], "/jsz?accounts=true&streams=true")
    streams = {s["name"]: s for a in jsz.get("account_details") or [] for s in a.get("stream_detail") or []}
    # CHAT_EVENTS only backs resuming a stream on another gateway: a copy in one node's memory is enough.
    single = [name for name, s in streams.items() if name != "CHAT_EVENTS" and not s["cluster"].get("replicas")]
    assert not single, f"streams kept on one node only: {single}"
    return str(streams[subjects.LOG_STREAM]["cluster"]["leader"])


def _busiest_node(cluster: NatsCluster, survivors: set[str]) -> ClusterNode:
    """The node most surviving processes are connected to (they all must reconnect), else the log's leader."""

    def survivor(name: str) -> bool:
        service, _, replica = name.rpartition("-")
        return name in survivors or (service in survivors and replica != "b")

    def survivors_on(node: ClusterNode) -> int:
        return sum(survivor(c.get("name", "")) for c in _monitor(node, "/connz?limit=1000")["connections"])

    leader = _log_leader(cluster)
    return max(cluster.nodes, key=lambda n: (survivors_on(n), n.name == leader))


@dataclass
class ScaledStack:
    stack: Stack
    cluster: NatsCluster
    second_gateway: str


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaledStack]:
    data = Path(tmp_path_factory.mktemp("scale-out"))
    cluster = start_nats_cluster(3, base_dir=str(data / "nats"))
    cache = Path(__file__).resolve().parents[2] / "var" / "cache" / "engine"
    env = {
        "SWITCHYARD_LOG_LEVEL": os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO"),
        "SWITCHYARD_INFERENCE_CACHE_DIR": str(cache),
        "NATS_REPLICAS": "3",
    }
    stack = Stack(data_dir=data, port=free_port(), env=env, nats_url=cluster.url)
    try:
        stack.start(timeout_s=600)
        for name in STAGES:
            stack.start_service(name, stack.service_env, replica="b")
        second = free_port()
        stack.start_service("gateway", {**stack.service_env, "SWITCHYARD_PORT": str(second)}, replica="b")
        assert stack.nats_url is not None
        asyncio.run(_replicas_answer(stack.nats_url, STAGES, "b", 300))
        _wait_http_ready(f"http://127.0.0.1:{second}", 120)
    except Exception:
        stack.stop()
        cluster.stop()
        for log in sorted((data / "logs").glob("*.log")):
            print(f"---- {log.name}\n{log.read_text()[-3000:]}")
        raise
    yield ScaledStack(stack, cluster, f"http://127.0.0.1:{second}")
    stack.stop()
    cluster.stop()


def _records(stack: Stack, rids: list[str], timeout_s: float) -> dict[str, list[dict[str, Any]]]:
    """Every listed record of `rids`, once each request's record carries the gateway's ending."""
    since = int(time.time() * 1000) - 600_000
    headers = {"Authorization": f"Bearer {stack.admin_key}"}
    listed: dict[str, list[dict[str, Any]]] = {}

    def settled() -> bool:
        nonlocal listed
        listed = {rid: [] for rid in rids}
        cursor = None
        while True:
            params: dict[str, Any] = {"since": since, "limit": 500, "replays": "false"}
            if cursor:
                params["cursor"] = cursor
            r = admin.get("/v1/admin/requests", params=params)
            r.raise_for_status()
            body = r.json()
            for item in body["items"]:
                if item["rid"] in listed:
                    listed[item["rid"]].append(item)
            cursor = body["next_cursor"]
            if not cursor:
                break
        return all(len(v) == 1 and v[0]["status"] in ("complete", "error") for v in listed.values())

    with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as admin:
        # Unsettled at the deadline, the caller's assertions say which request went wrong and how.
        with contextlib.suppress(WaitTimeout):
            wait_until(settled, timeout_s, "every record to settle", 1.0)
    return listed


@pytest.mark.timeout(600)  # with starting 3 NATS nodes and 15 services, two of them engines
def test_losing_a_nats_node_and_a_replica_of_every_stage_loses_no_request(scaled: ScaledStack) -> None:
    stack, cluster = scaled.stack, scaled.cluster
    auth = {"Authorization": f"Bearer {stack.api_key}"}
    timeout = httpx.Timeout(10.0, read=110.0)
    with (
        httpx.Client(base_url=stack.url, headers=auth, timeout=timeout) as first,
        httpx.Client(base_url=scaled.second_gateway, headers=auth, timeout=timeout) as second,
    ):
        # The router needs a heartbeat before it routes: one answered request per gateway.
        for c in (first, second):

            def answered(c: httpx.Client = c) -> bool:
                with c.stream("POST", "/chat", json={"chatId": "so-warm", "text": "Hi.", "max_tokens": 2}) as r:
                    evs = list(events(r)) if r.status_code == 200 else []
                assert evs and evs[-1].event == "done", f"the scaled stack never answered: {r.status_code} {evs[-1:]}"
                return True

            wait_until(answered, 120, "the scaled stack to answer", 1.0, ignore=(AssertionError,))

        load = Load()
        tag = uuid.uuid4().hex[:6]
        load.start([first, second], 1, WAVE1, tag)
        wave1 = list(load.outcomes)
        # Mid-answer: most streams have text, none may have ended yet on a fast machine.
        assert load.wait(lambda: sum(o.deltas >= 2 or o.ended_at is not None for o in wave1) >= WAVE1 * 2 // 3, 180)
        mid_stream = sum(o.deltas >= 2 and o.ended_at is None for o in wave1)

        doomed = {s: (s if i % 2 == 0 else f"{s}-b") for i, s in enumerate(STAGES)}
        # A survivor's connection is named `<service>-b`, or `<service>-<random id>` for the first replica.
        survivors = {f"{s}-b" if tag_ == s else s for s, tag_ in doomed.items()} | {"gateway", "gateway-b"}
        victim = _busiest_node(cluster, survivors)
        victim_led_log = victim.name == _log_leader(cluster)
        killed_at = time.monotonic()
        victim.kill()
        for tag_ in doomed.values():
            os.kill(stack.procs[tag_].pid, signal.SIGKILL)
        for tag_ in doomed.values():
            stack.procs.pop(tag_).wait()
        load.start([first, second], 2, WAVE2, tag)

        ended = load.wait(lambda: all(o.ended_at is not None for o in load.outcomes), ENDED_WITHIN_S)
        hung = [(o.wave, o.rid, o.deltas) for o in load.outcomes if o.ended_at is None]
        assert ended, f"requests still open {ENDED_WITHIN_S:.0f} s after the kills: {hung}"

    def summary(wave: int, since: float) -> str:
        outs = [o for o in load.outcomes if o.wave == wave]
        done = sum(o.terminal is not None and o.terminal.event == "done" for o in outs)
        codes = sorted(
            {
                f"{o.terminal.data['code']}: {o.terminal.data['message']}"
                for o in outs
                if o.terminal is not None and o.terminal.event == "error"
            }
        )
        ends = sorted((o.ended_at or 0) - since for o in outs)
        firsts = sorted(o.first_delta_at - since for o in outs if o.first_delta_at is not None and wave == 2)
        text = f" (first text {firsts[0]:.1f}-{firsts[-1]:.1f} s)" if firsts else ""
        return (
            f"wave {wave}: {len(outs)} requests, {done} done, {len(outs) - done} error {codes}; "
            f"ended {ends[0]:.1f}-{ends[-1]:.1f} s after the kills{text}"
        )

    print(
        f"\nkilled NATS node {victim.name}{' (the LOG leader)' if victim_led_log else ''} and {', '.join(doomed.values())} "
        f"with {mid_stream} of {WAVE1} streams mid-answer"
    )
    print(summary(1, killed_at))
    print(summary(2, killed_at))

    for o in load.outcomes:
        assert not o.broken, f"request {o.rid} (wave {o.wave}) broke off: {o.broken}"
        assert o.status == 200 and o.terminal is not None, (o.wave, o.rid, o.status, o.events[-3:])
        if o.terminal.event == "error":
            assert {"type", "code", "message"} <= set(o.terminal.data), o.terminal.data

    # What is left serves new work in full: failover, not just a clean refusal.
    assert all(o.terminal is not None and o.terminal.event == "done" for o in load.outcomes if o.wave == 2)

    rids = [o.rid for o in load.outcomes]
    assert len(set(rids)) == len(rids)
    listed = _records(stack, rids, 90)
    for o in load.outcomes:
        recs = listed[o.rid]
        assert len(recs) == 1, f"request {o.rid} has {len(recs)} records"
        want = "complete" if o.terminal is not None and o.terminal.event == "done" else "error"
        assert recs[0]["status"] == want, (o.rid, o.terminal, recs[0])
