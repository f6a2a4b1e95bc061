"""`python -m switchyard.services.gateway`: starts, installs the configured keys, answers health, drains on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import httpx

from switchyard.libs.bus import NatsServer
from switchyard.libs.bus.embedded import free_port
from switchyard.schemas import HealthReply, HealthRequest, subjects
from tests.services.gateway.harness import Responder, connect
from tests.services.gateway.sse_client import parse
from tests.wait import wait_for


async def test_process_lifecycle(nats_server: NatsServer, responder: Responder, tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "NATS_URL": nats_server.url,
        "SWITCHYARD_PORT": str(port),
        "SWITCHYARD_DATA_DIR": str(tmp_path),
        "SWITCHYARD_API_KEY": "dev-key-for-tests",
        "SWITCHYARD_ADMIN_KEY": "admin-key-for-tests",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "switchyard.services.gateway",
        env=env,
        cwd=Path(__file__).parents[3],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    bus = await connect(nats_server, "probe")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            # A process start under a loaded 2-core machine can take a while: wait up to a minute.
            async def healthy() -> bool:
                return (await c.get("/healthz")).status_code == 200

            await wait_for(healthy, timeout=60, what="the gateway process's /healthz", ignore=(httpx.TransportError,))
            assert (await c.get("/v1/models", headers={"x-api-key": "dev-key-for-tests"})).status_code == 200
            r = await c.get("/v1/admin/requests/x", headers={"Authorization": "Bearer dev-key-for-tests"})
            assert r.status_code == 403
            # Other test modules' gateways may share this nats-server's queue group: ask until the process answers.
            # The process subscribes to health just after its HTTP server is up: the first answers may
            # all come from the others, so ask again for a while (up to ~10 s).
            replicas = set()

            async def the_process_answered() -> bool:
                reply = await bus.request(subjects.health("gateway"), HealthRequest(), HealthReply, timeout=5)
                assert reply.stage == "gateway"
                replicas.add(reply.replica)
                return bool(replicas - {"r0"})

            await wait_for(the_process_answered, what="the gateway process to answer its health subject")
            assert replicas - {"r0"}, "the gateway process never answered its health subject"
            assert (tmp_path / "gateway.db").exists()

            # SIGTERM while a stream is open: the stream still finishes, then the process exits cleanly.
            body = {"chatId": "c1", "text": "slow"}
            async with c.stream("POST", "/chat", json=body, headers={"x-api-key": "dev-key-for-tests"}) as r:
                lines = []
                async for line in r.aiter_lines():
                    lines.append(line)
                    if line.startswith("data:") and sum(x.startswith("data:") for x in lines) == 1:
                        proc.send_signal(signal.SIGTERM)
            assert [e.event for e in parse("\n".join(lines))] == ["delta"] * 6 + ["done"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 20)
        await bus.drain()
    assert rc == 0
