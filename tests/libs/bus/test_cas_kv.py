"""CasKV: raw values written by compare-and-set on the entry's revision (what the rate limiter shares)."""

from __future__ import annotations

import uuid

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.kv import CasKV
from switchyard.libs.telemetry import setup_tracing


async def _bus(server: NatsServer, name: str) -> Bus:
    return await Bus.connect(server.url, name, uuid.uuid4().hex[:6], setup_tracing(name))


async def test_compare_and_set_lets_one_of_two_racing_writers_win(nats_server: NatsServer) -> None:
    a, b = await _bus(nats_server, "a"), await _bus(nats_server, "b")
    bucket = f"cas_{uuid.uuid4().hex[:8]}"
    try:
        ka, kb = await CasKV.open(a, bucket, ttl_s=60), await CasKV.open(b, bucket, ttl_s=60)
        assert await ka.get("k") == (None, 0)
        assert await ka.put_if("k", b"one", 0)
        assert not await kb.put_if("k", b"two", 0)  # created already: b read nothing and lost
        value, rev = await kb.get("k")
        assert value == b"one" and rev > 0
        # Both read the same revision; the first write moves it on, so the second is refused.
        assert await kb.put_if("k", b"b-wins", rev)
        assert not await ka.put_if("k", b"a-loses", rev)
        assert (await ka.get("k"))[0] == b"b-wins"
    finally:
        await a.drain()
        await b.drain()
