"""Readiness of stages over the bus, for a stack started without the gateway (whose `/readyz` asks the same)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable

from switchyard.libs.bus import Bus, BusError
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import HealthReply, HealthRequest, Heartbeat, subjects


async def _ready(bus: Bus, stage: str, timeout_s: float) -> bool:
    try:
        reply = await bus.request(subjects.health(stage), HealthRequest(), HealthReply, timeout=timeout_s)
    except (BusError, TimeoutError):
        return False
    return reply.ok


async def _wait(nats_url: str, stages: list[str], timeout_s: float, check: Callable[[], None]) -> None:
    bus = await Bus.connect(nats_url, "cli", uuid.uuid4().hex[:6], setup_tracing("cli"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        missing = list(stages)
        while True:
            check()
            oks = await asyncio.gather(*(_ready(bus, s, 1.0) for s in missing))
            missing = [s for s, ok in zip(missing, oks, strict=True) if not ok]
            if not missing:
                return
            if loop.time() >= deadline:
                raise TimeoutError(f"not ready within {timeout_s}s: {', '.join(missing)}")
            await asyncio.sleep(0.2)
    finally:
        await bus.close()


def wait_stages_ready(nats_url: str, stages: list[str], timeout_s: float, check: Callable[[], None]) -> None:
    """Until every stage answers `health.<stage>`; `check` is called between rounds and may raise to give up."""
    asyncio.run(_wait(nats_url, stages, timeout_s, check))


async def _pools_live(nats_url: str, pools: set[str], timeout_s: float, check: Callable[[], None]) -> None:
    bus = await Bus.connect(nats_url, "cli", uuid.uuid4().hex[:6], setup_tracing("cli"))
    seen: set[str] = set()
    changed = asyncio.Event()

    async def on_beat(_key: str, beat: Heartbeat | None) -> None:
        if beat is not None:
            seen.add(beat.pool)
            changed.set()

    registry = await bus.kv(subjects.REPLICAS_BUCKET, Heartbeat, ttl_s=subjects.REPLICAS_TTL_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        await registry.watch(on_beat)
        while not pools <= seen:
            check()
            if loop.time() >= deadline:
                raise TimeoutError(f"no live replica within {timeout_s}s of pool(s) {', '.join(sorted(pools - seen))}")
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.5)
    finally:
        registry.stop()
        await bus.close()


def wait_pools_live(nats_url: str, pools: set[str], timeout_s: float, check: Callable[[], None]) -> None:
    """Until a replica of every pool has announced itself (its heartbeat: its model is loaded and it takes
    work). A stage's health subject is answered by any one of its processes, so with a pool per model
    `/readyz` alone would say ready while a slower model still loads."""
    asyncio.run(_pools_live(nats_url, pools, timeout_s, check))
