"""A service's life: logging and tracing → bus → handlers → wait for SIGTERM → drain."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import structlog
import uvloop

from switchyard.libs.bus.bus import Bus, stable_id
from switchyard.libs.bus.settings import ServiceSettings
from switchyard.libs.telemetry import Telemetry, configure_logging, setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, SpanBatch, subjects

Cleanup = Callable[[], Awaitable[None]]
Setup = Callable[[Bus], Awaitable[Cleanup | None]]
S = TypeVar("S", bound=ServiceSettings)


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """A service process's event loop: uvloop's, which does a relayed frame's socket and callback work in
    C (the per-token path runs through a loop in every stage)."""
    uvloop.run(main)


def stop_on_signals(stop: asyncio.Event, supervisor_pid: int | None = None) -> Callable[[], None]:
    """SIGTERM and SIGINT set `stop`; so does the supervisor's exit, when there is one (a pidfd turns
    readable when its process ends, however it ended). Returns what stops the watch."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if supervisor_pid is None:
        return lambda: None
    log = structlog.get_logger()
    try:
        fd = os.pidfd_open(supervisor_pid)
    except ProcessLookupError:
        log.warning("supervisor gone: stopping", supervisor_pid=supervisor_pid)
        stop.set()
        return lambda: None

    def gone() -> None:
        log.warning("supervisor gone: stopping", supervisor_pid=supervisor_pid)
        stop.set()
        unwatch()

    def unwatch() -> None:
        if loop.remove_reader(fd):
            os.close(fd)

    loop.add_reader(fd, gone)
    return unwatch


def run_service(service: str, settings: S, setup: Callable[[Bus, S], Awaitable[Cleanup | None]]) -> None:
    """A service's `__main__`: the settings are built once there and handed to its setup."""
    run_loop(
        serve(
            service,
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
            torch_threads=settings.torch_threads,
            js_replicas=settings.nats_replicas,
            otlp_endpoint=settings.otlp_endpoint,
            supervisor_pid=settings.supervisor_pid,
        )
    )


async def serve(
    service: str,
    nats_url: str,
    setup: Setup,
    *,
    replica: str | None = None,
    log_level: str = "INFO",
    torch_threads: int = 0,
    js_replicas: int = 1,
    otlp_endpoint: str | None = None,
    supervisor_pid: int | None = None,
) -> None:
    configure_logging(service, log_level)
    log = structlog.get_logger()
    # Watched from the first line: a supervisor that dies while this stage starts (a router waiting for
    # its first replica, a model loading) stops it there too.
    stop = asyncio.Event()
    unwatch = stop_on_signals(stop, supervisor_pid)
    telemetry = setup_tracing(service, otlp_endpoint)
    replica = replica or uuid.uuid4().hex[:8]
    bus = await Bus.connect(nats_url, service, replica, telemetry, js_replicas)
    starting = asyncio.ensure_future(_start(bus, service, replica, setup, telemetry, torch_threads))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    cleanup = None
    if starting.done():
        cleanup = starting.result()
        log.info("ready", replica=replica)
        await stopping
    else:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
    unwatch()
    log.info("draining")
    await bus.quiesce()
    if cleanup is not None:
        await cleanup()
    await telemetry.shutdown()
    await bus.close()
    log.info("stopped")


async def _start(
    bus: Bus, service: str, replica: str, setup: Setup, telemetry: Telemetry, torch_threads: int
) -> Cleanup | None:
    await bus.ensure_log_stream()
    bus.on_reconnect(bus.ensure_log_stream)  # a server restarted without its store makes it anew

    async def publish_spans(batch: SpanBatch) -> None:
        first = batch.spans[0]
        await bus.publish_durable(
            subjects.LOG_SPANS, batch, stable_id(first.trace_id, first.span_id, str(len(batch.spans)))
        )

    telemetry.attach_nats(asyncio.get_running_loop(), publish_spans)
    cleanup = await setup(bus)
    torch = sys.modules.get("torch")
    if torch_threads and torch is not None:  # only a service that loaded a model has torch to tune
        torch.set_num_threads(torch_threads)

    async def health(req: HealthRequest) -> HealthReply:
        holds = None if req.rid is None else req.rid in bus.held
        return HealthReply(stage=service, replica=replica, holds=holds)

    # Subscribed last: a stage answers health checks only once it can take work.
    await bus.subscribe(subjects.health(service), HealthRequest, health, queue=service, span=False)
    await bus.subscribe(subjects.health_of(service, replica), HealthRequest, health, span=False)
    return cleanup
