"""safety_out and the safety_in it asks, started as their services start them, for a test module's stack."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.telemetry import setup_tracing
from switchyard.services.safety_in.service import setup as setup_safety_in
from switchyard.services.safety_in.settings import SafetyInSettings
from switchyard.services.safety_out.service import setup
from switchyard.services.safety_out.settings import SafetyOutSettings


@contextlib.asynccontextmanager
async def checking_stages(nats_server: NatsServer, settings: SafetyOutSettings | None = None) -> AsyncIterator[None]:
    """safety_out replica s1 (with ``settings``, the defaults when None) and safety_in replica j1 on
    `nats_server`; cleaned up and closed on exit."""
    service = await Bus.connect(nats_server.url, "safety_out", "s1", setup_tracing("safety_out"))
    await service.ensure_log_stream()
    cleanup = await setup(service, settings or SafetyOutSettings())
    judge = await Bus.connect(nats_server.url, "safety_in", "j1", setup_tracing("safety_in"))
    judge_cleanup = await setup_safety_in(judge, SafetyInSettings())
    try:
        yield
    finally:
        for c in (cleanup, judge_cleanup):
            if c is not None:
                await c()
        await service.close()
        await judge.close()
