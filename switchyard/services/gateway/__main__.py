"""settings → logging/tracing → bus → app → uvicorn in the same loop → on SIGTERM/SIGINT drain.

`switchyard.libs.bus.serve` owns its loop's life, and uvicorn must share the loop with the bus, so this mirrors it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import uuid
from collections.abc import Iterator

import structlog
import uvicorn
from sse_starlette.sse import AppStatus

from switchyard.libs.bus.runner import run_loop, stop_on_signals
from switchyard.libs.telemetry import configure_logging, setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, subjects
from switchyard.services.gateway.app import create_app
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.lifespan import gateway_lifespan
from switchyard.services.gateway.settings import GatewaySettings

SERVICE = "gateway"
# Allocations between collections of the youngest generation (CPython's default: 700).
YOUNG_GC_THRESHOLD = 20_000


class _Server(uvicorn.Server):
    """uvicorn would take SIGTERM for itself; the signals belong to `main`, which drains in order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def main() -> None:
    settings = GatewaySettings()
    configure_logging(SERVICE, settings.log_level)
    log = structlog.get_logger()
    telemetry = setup_tracing(SERVICE, settings.otlp_endpoint)
    replica = settings.replica or uuid.uuid4().hex[:8]
    # The gateway drains its own streams below (they finish, up to a request timeout); sse-starlette must
    # not cut them on its own at the signal.
    AppStatus.disable_automatic_graceful_drain()
    # The lifespan opens the key store, the bus and what lives on it, and closes them after the last stream.
    app = create_app(settings, lifespan=gateway_lifespan(settings, telemetry, replica))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # Open streams finish, for at most one request timeout; then the lifespan closes the bus.
        timeout_graceful_shutdown=math.ceil(settings.request_timeout_s),
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # a bind failure (or a lifespan that could not open) surfaces here
            raise SystemExit(1)
        await asyncio.sleep(0.05)
    gw: Gateway = app.state.gateway

    async def health(_: HealthRequest) -> HealthReply:
        return HealthReply(stage=SERVICE, replica=replica)

    # What the gateway holds from its start on (the app, its routes' and models' schemas: most of its heap)
    # is never garbage, yet every full collection walked it again, each one a few hundred ms of a busy
    # gateway's CPU; frozen, collections walk only what requests made. A token's allocations are freed by
    # their references, so the youngest generation is collected less often too (docs/benchmarks.md).
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    # Subscribed last: the gateway answers health checks only once it can take requests.
    await gw.bus.subscribe(subjects.health(SERVICE), HealthRequest, health, queue=SERVICE, span=False)
    log.info("ready", replica=replica, url=f"http://{settings.host}:{settings.port}")

    stop = asyncio.Event()
    unwatch = stop_on_signals(stop, settings.supervisor_pid)
    await stop.wait()
    unwatch()
    log.info("draining")
    # Stop answering health first (per-request subscriptions live on the raw connection and stay), then
    # stop taking connections; uvicorn lets open streams finish and runs the lifespan's shutdown.
    await gw.bus.quiesce()
    server.should_exit = True
    await serving
    log.info("stopped")


if __name__ == "__main__":
    run_loop(main())
