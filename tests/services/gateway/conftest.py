"""Fixtures: one scripted pipeline and one gateway per module (see harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import NatsServer
from switchyard.schemas import subjects
from tests.services.gateway.harness import Gateway, Responder, connect, gateway


@pytest.fixture(scope="module")
async def responder(nats_server: NatsServer) -> AsyncIterator[Responder]:
    bus = await connect(nats_server, "responder")
    r = Responder(bus=bus, healthy=set(subjects.STAGES))
    await r.start()
    yield r
    await bus.drain()


@pytest.fixture(scope="module")
async def gw(
    nats_server: NatsServer, responder: Responder, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Gateway]:
    data = tmp_path_factory.mktemp("gw")
    async with gateway(nats_server, data, request_timeout_s=3.0, cancel_wait_s=1.0) as g:
        _, g.pro_key = await g.keys.create("acme", "pro", user="ann")
        k, g.free_key = await g.keys.create("acme", "free", user="bob")
        g.free_key_id = k.id
        _, g.admin_key = await g.keys.create("ops", "pro", user="root", admin=True)
        yield g
