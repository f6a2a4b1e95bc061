"""Two inference replicas: conversations stick to one (and hit its prefix cache), then fail over."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from switchyard.cli.stack import Stack
from switchyard.libs.bus.headers import now_ms
from switchyard.schemas import Heartbeat
from switchyard.services.router.replicas import rendezvous, sticky_key
from tests.e2e.conftest import admin_record, chat
from tests.wait import wait_until


def route_of(stack: Stack, rid: str) -> dict[str, Any]:
    rec = admin_record(stack, rid, lambda r: "route" in r["record"] and r["record"].get("status") == "complete")
    return dict(rec["record"]["route"])


def send(client: httpx.Client, stack: Stack, chat_id: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    evs, resp = chat(client, chat_id, text)
    assert evs and evs[-1].event == "done", evs
    return route_of(stack, resp.headers["x-request-id"]), evs[-1].data


def test_sticky_replica_cache_hit_and_failover(client: httpx.Client, stack: Stack) -> None:
    _, probe = chat(client, f"r-{uuid.uuid4().hex[:8]}", "Hi")
    first = route_of(stack, probe.headers["x-request-id"])["replica"]
    tenant = admin_record(stack, probe.headers["x-request-id"])["record"]["tenant"]
    second = "replica-b"
    proc = stack.start_service("inference", stack.service_env, replica=second)
    try:
        # Wait until the router sends work to the new replica: its heartbeat is in the registry.
        beats = [
            Heartbeat(replica=r, pool="default", model="m", max_model_len=1, ts_ms=now_ms()) for r in (first, second)
        ]
        chat_id = next(
            c
            for c in (f"s-{i}-{uuid.uuid4().hex[:6]}" for i in range(100))
            if rendezvous(sticky_key(tenant, c, ""), beats).replica == second
        )

        def routed_to_second() -> dict[str, Any]:
            route, _ = send(client, stack, chat_id, "Name a colour.")
            assert route["replica"] == second or proc.poll() is None, (
                f"replica {second} exited; see {stack.data_dir}/logs"
            )
            # Not second yet: falsy, and the route itself is what the timeout reports.
            return route if route["replica"] == second else {}

        route = wait_until(routed_to_second, 180, f"the router to route to {second}", 2)
        assert route["replica"] == second, route
        route2, usage2 = send(client, stack, chat_id, "Name another colour.")
        assert route2["replica"] == second and "sticky" in route2["reason"]
        assert usage2["cached_tokens"] > 0, usage2
    finally:
        stack.stop_service(f"inference-{second}")
    route3, _ = send(client, stack, chat_id, "And one more colour?")
    assert route3["replica"] == first
    assert f"failover: replica {second} is gone" in route3["reason"]
