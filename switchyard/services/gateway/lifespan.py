"""What the served app opens before its first request and closes after its last: the key store, the bus
(with its streams and the model registry) and the bus-backed objects (limiter, key budgets, key standing).

Tests build the app on a bus and key store they own (`create_app(settings, bus, keys)`, no lifespan);
`python -m switchyard.services.gateway` builds it with this lifespan. A bus-backed object that cannot open
at startup (no JetStream yet) is not fatal: it stays opened-on-use and is tried again every 30 s (lazy.py),
so the gateway serves without limits rather than not at all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import structlog
from fastapi import FastAPI

from switchyard.libs.bus import Bus
from switchyard.libs.bus.bus import stable_id
from switchyard.libs.models.live import LiveModels
from switchyard.libs.store.keys import KeyStore
from switchyard.libs.telemetry import Telemetry
from switchyard.schemas import SpanBatch, subjects
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.runs.resume import ensure_events_stream
from switchyard.services.gateway.settings import GatewaySettings

SERVICE = "gateway"

log = structlog.get_logger()


async def install_configured_keys(settings: GatewaySettings, keys: KeyStore) -> None:
    if settings.dev_api_key:
        await keys.upsert(settings.dev_api_key, tenant="default", user="dev", tier="pro")
    if settings.admin_api_key:
        await keys.upsert(settings.admin_api_key, tenant="default", user="admin", tier="pro", admin=True)


async def _open_bus(settings: GatewaySettings, telemetry: Telemetry, replica: str) -> Bus:
    bus = await Bus.connect(settings.nats_url, SERVICE, replica, telemetry, settings.nats_replicas)
    await bus.ensure_log_stream()

    async def ensure_streams() -> None:
        if settings.resume_stream:
            try:
                await ensure_events_stream(bus, settings.resume_stream_max_age_s, settings.resume_stream_max_bytes)
            except Exception as e:  # e.g. a JetStream memory limit: resuming then works on the relaying replica only
                log.warning("stream replay across replicas unavailable", error=str(e))

    await ensure_streams()
    # The events stream lives in the server's memory: a restarted server has lost it, and the log stream
    # too where it came back without its store.
    bus.on_reconnect(bus.ensure_log_stream)
    bus.on_reconnect(ensure_streams)

    async def publish_spans(batch: SpanBatch) -> None:
        first = batch.spans[0]
        await bus.publish_durable(
            subjects.LOG_SPANS, batch, stable_id(first.trace_id, first.span_id, str(len(batch.spans)))
        )

    telemetry.attach_nats(asyncio.get_running_loop(), publish_spans)
    return bus


async def _warm(gw: Gateway) -> None:
    """Open the bus-backed objects now rather than on the first request; each one that fails logs its
    warning and is retried on use, every 30 s (lazy.py)."""
    await gw.limiter()
    await gw.standings.kv()
    await gw.key_policy.budgets()
    await gw.key_policy.listen()


def gateway_lifespan(
    settings: GatewaySettings, telemetry: Telemetry, replica: str
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        keys = await KeyStore.open(settings.db_url(), verified_ttl_s=settings.key_cache_s)
        await install_configured_keys(settings, keys)
        bus = await _open_bus(settings, telemetry, replica)
        gw = Gateway(settings=settings, bus=bus, keys=keys, metrics=app.state.metrics)
        # Before the first request: every model name resolves against the registry as the bus holds it.
        try:
            gw.models = await LiveModels.follow(bus, settings.registry)
        except Exception as e:  # no JetStream: the gateway still serves, on its settings' registry
            log.warning("model registry unavailable: serving the settings' models", error=str(e))
        await _warm(gw)
        app.state.gateway = gw
        try:
            yield
        finally:
            # After uvicorn has let the open streams finish (its graceful-shutdown timeout).
            await gw.runs.close()
            if gw.models is not None:
                await gw.models.close()
            await telemetry.shutdown()
            await bus.close()
            await keys.close()

    return lifespan
