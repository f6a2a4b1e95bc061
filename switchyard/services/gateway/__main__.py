"""settings → logging/tracing → bus → app → uvicorn in the same loop → on SIGTERM/SIGINT drain.

`switchyard.libs.bus.serve` owns its loop's life, and uvicorn must share the loop with the bus, so this mirrors it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import Iterator

import structlog
import uvicorn
from sse_starlette.sse import AppStatus

from switchyard.libs.bus import Bus
from switchyard.libs.bus.bus import stable_id
from switchyard.libs.bus.runner import run_loop
from switchyard.libs.models.live import LiveModels
from switchyard.libs.store.keys import KeyStore
from switchyard.libs.telemetry import configure_logging, setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, SpanBatch, subjects
from switchyard.services.gateway.app import create_app
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.runs.resume import ensure_events_stream
from switchyard.services.gateway.settings import GatewaySettings

SERVICE = "gateway"


class _Server(uvicorn.Server):
    """uvicorn would take SIGTERM for itself; the signals belong to `main`, which drains in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def install_configured_keys(settings: GatewaySettings, keys: KeyStore) -> None:
    if settings.dev_api_key:
        await keys.upsert(settings.dev_api_key, tenant="default", user="dev", tier="pro")
    if settings.admin_api_key:
        await keys.upsert(settings.admin_api_key, tenant="default", user="admin", tier="pro", admin=True)


async def main() -> None:
    settings = GatewaySettings()
    configure_logging(SERVICE, settings.log_level)
    log = structlog.get_logger()
    telemetry = setup_tracing(SERVICE, settings.otlp_endpoint)
    replica = settings.replica or uuid.uuid4().hex[:8]
    keys = await KeyStore.open(settings.db_url(), verified_ttl_s=settings.key_cache_s)
    await install_configured_keys(settings, keys)
    bus = await Bus.connect(settings.nats_url, SERVICE, replica, telemetry, settings.nats_replicas)
    await bus.ensure_log_stream()
    if settings.resume_stream:
        try:
            await ensure_events_stream(bus, settings.resume_stream_max_age_s, settings.resume_stream_max_bytes)
        except Exception as e:  # e.g. a JetStream memory limit: resuming then works on the relaying replica only
            log.warning("stream replay across replicas unavailable", error=str(e))

    async def publish_spans(batch: SpanBatch) -> None:
        first = batch.spans[0]
        await bus.publish_durable(
            subjects.LOG_SPANS, batch, stable_id(first.trace_id, first.span_id, str(len(batch.spans)))
        )

    telemetry.attach_nats(asyncio.get_running_loop(), publish_spans)
    # The gateway drains its own streams below (they finish, up to a request timeout); sse-starlette must
    # not cut them on its own at the signal.
    AppStatus.disable_automatic_graceful_drain()
    app = create_app(settings, bus, keys)
    gw: Gateway = app.state.gateway
    # Before the first request: every model name resolves against the registry as the bus holds it.
    try:
        gw.models = await LiveModels.follow(bus, settings.registry)
    except Exception as e:  # no JetStream: the gateway still serves, on its settings' registry (as lazy.py)
        log.warning("model registry unavailable: serving the settings' models", error=str(e))

    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_config=None, access_log=False, lifespan="off"
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # a bind failure surfaces here
            return
        await asyncio.sleep(0.05)

    async def health(_: HealthRequest) -> HealthReply:
        return HealthReply(stage=SERVICE, replica=replica)

    # Subscribed last: the gateway answers health checks only once it can take requests.
    await bus.subscribe(subjects.health(SERVICE), HealthRequest, health, queue=SERVICE, span=False)
    log.info("ready", replica=replica, url=f"http://{settings.host}:{settings.port}")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("draining")
    # Stop answering health first (per-request subscriptions live on the raw connection and stay), then
    # stop taking connections and let open streams finish, for at most one request timeout.
    await bus.quiesce()
    server.should_exit = True
    try:
        await asyncio.wait_for(serving, settings.request_timeout_s)
    except TimeoutError:
        log.warning("streams still open at shutdown")
    await gw.runs.close()
    if gw.models is not None:
        await gw.models.close()
    await telemetry.shutdown()
    await bus.close()
    await keys.close()
    log.info("stopped")


if __name__ == "__main__":
    run_loop(main())
