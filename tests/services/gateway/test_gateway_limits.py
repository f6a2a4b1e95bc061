"""Per-tier limits shared by two gateways through JetStream key-value, and the per-process admission limit."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import openai
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.libs.limits import Limiter
from switchyard.libs.store.keys import KeyStore
from tests.services.gateway.harness import Responder, gateway, tiny_tiers
from tests.wait import wait_for

CHAT = {"chatId": "c1", "text": "hello"}


async def test_requests_per_minute_shared_by_two_gateways(
    nats_server: NatsServer, responder: Responder, tmp_path: Path
) -> None:
    store = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")
    _, key = await store.create("tiny", "free")
    bucket = f"lim_{uuid.uuid4().hex[:8]}"
    common = {"tiers": tiny_tiers(), "limits_bucket": bucket}
    async with (
        gateway(nats_server, tmp_path / "a", keys=store, **common) as a,
        gateway(nats_server, tmp_path / "b", keys=store, **common) as b,
    ):
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient() as c:
            for url in (a.url, b.url, a.url):
                r = await c.post(f"{url}/chat", json=CHAT, headers=auth)
                assert r.status_code == 200
            r = await c.post(f"{b.url}/chat", json={"chatId": "refused-1", "text": "hello"}, headers=auth)
            assert r.status_code == 429
            assert not any(q.chat_id == "refused-1" for q in responder.opened)  # a refusal creates nothing
            assert r.json()["error"]["code"] == "rate_limited"
            assert r.json()["error"]["type"] == "rate_limit_error"
            assert "requests per minute" in r.json()["error"]["message"]
            assert 1 <= int(r.headers["Retry-After"]) <= 21
            assert r.headers["x-request-id"]
            metrics = (await c.get(f"{b.url}/metrics")).text
            assert 'switchyard_gateway_rate_limited_total{limit="requests_per_minute"} 1.0' in metrics
        sdk = openai.AsyncOpenAI(base_url=f"{a.url}/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.RateLimitError):
            await sdk.chat.completions.create(
                model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "hello"}]
            )
    await store.close()


async def test_tokens_and_concurrent_streams(nats_server: NatsServer, responder: Responder, tmp_path: Path) -> None:
    async with gateway(nats_server, tmp_path, tiers=tiny_tiers()) as g:
        _, key = await g.keys.create("tok", "pro")  # 50 tokens/minute, one stream at a time
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=g.url) as c:
            # A request refused after admission (unknown chat) gives its stream lease back.
            assert (await c.post("/chat", json={"chatId": "other-1", "text": "hi"}, headers=auth)).status_code == 404
            # One stream holds the only lease; a second is refused until it ends.
            async with c.stream("POST", "/chat", json={"chatId": "c1", "text": "hang"}, headers=auth) as r:
                rid = r.headers["x-request-id"]
                lines = r.aiter_lines()  # held: a dropped iterator would close the response
                async for line in lines:
                    if line.startswith("data:"):
                        break
                refused = await c.post("/chat", json=CHAT, headers=auth)
                assert refused.status_code == 429
                assert "concurrent streams" in refused.json()["error"]["message"]
                assert "Retry-After" in refused.headers
                assert (await c.post(f"/v1/streams/{rid}/cancel", headers=auth)).status_code == 202
                async for _ in lines:
                    pass
            # That stream used 45 tokens; the next one overdraws the 50-token bucket; the third waits.
            assert (await c.post("/chat", json=CHAT, headers=auth)).status_code == 200
            r3 = await c.post("/chat", json=CHAT, headers=auth)
            assert r3.status_code == 429
            assert "tokens per minute" in r3.json()["error"]["message"]
            assert int(r3.headers["Retry-After"]) >= 1


async def test_admission_limit_is_503(nats_server: NatsServer, responder: Responder, tmp_path: Path) -> None:
    async with gateway(nats_server, tmp_path, max_active_streams=1) as g:
        _, key = await g.keys.create("adm", "pro")
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=g.url) as c:
            async with c.stream("POST", "/chat", json={"chatId": "c1", "text": "hang"}, headers=auth) as r:
                lines = r.aiter_lines()
                async for line in lines:
                    if line.startswith("data:"):
                        break
                busy = await c.post("/chat", json=CHAT, headers=auth)
                assert busy.status_code == 503
                assert busy.json()["error"]["code"] == "overloaded"
                assert busy.headers["Retry-After"] == "1"
            # Until the gateway has let go of the closed stream's slot.
            await wait_for(lambda: g.app.state.gateway.runs.active == 0, what="the closed stream to free its slot")
            assert (await c.post("/chat", json=CHAT, headers=auth)).status_code == 200


async def test_limiter_compare_and_set_under_contention(nats_server: NatsServer) -> None:
    """Many concurrent admits from two limiters never exceed the bucket."""
    from tests.services.gateway.harness import connect

    bus_a, bus_b = await connect(nats_server, "la"), await connect(nats_server, "lb")
    bucket = f"lim_{uuid.uuid4().hex[:8]}"
    la, lb = await Limiter.open(bus_a, bucket), await Limiter.open(bus_b, bucket)
    limits = tiny_tiers()["free"].model_copy(update={"requests_per_minute": 10, "concurrent_streams": 100})
    results = await asyncio.gather(*((la if i % 2 else lb).admit("t", f"r{i}", limits, lease_s=60) for i in range(30)))
    assert sum(r is None for r in results) == 10
    assert {r.limit for r in results if r is not None} == {"requests_per_minute"}
    await bus_a.drain()
    await bus_b.drain()


async def test_one_gateways_admissions_of_a_tenant_share_writes(nats_server: NatsServer) -> None:
    """Hundreds of streams of one tenant arriving at once: each is decided (none waits out the limiter's
    timeout and is let through unchecked), exactly the tier's concurrency is leased, and the gateway's
    writes are grouped (far fewer compare-and-sets than requests)."""
    from tests.services.gateway.harness import connect

    bus = await connect(nats_server, "lg")
    limiter = await Limiter.open(bus, f"lim_{uuid.uuid4().hex[:8]}")
    writes = 0
    put_if = limiter.kv.put_if

    async def counted(key: str, value: bytes, revision: int) -> bool:
        nonlocal writes
        writes += 1
        return await put_if(key, value, revision)

    limiter.kv.put_if = counted  # type: ignore[method-assign]
    limits = tiny_tiers()["free"].model_copy(
        update={"requests_per_minute": 10_000, "tokens_per_minute": 1e9, "concurrent_streams": 300}
    )
    results = await asyncio.gather(*(limiter.admit("busy", f"r{i}", limits, lease_s=60) for i in range(400)))
    assert sum(r is None for r in results) == 300
    assert {r.limit for r in results if r is not None} == {"concurrent_streams"}
    assert writes < 40
    await asyncio.gather(*(limiter.settle("busy", f"r{i}", 10, limits) for i in range(300)))
    again = await limiter.admit("busy", "after", limits, lease_s=60)
    assert again is None  # the settled leases were returned
    await bus.drain()
