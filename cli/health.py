"""Readiness of stages over the bus, for a stack started without the gateway (whose `/readyz` asks the same)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from libs.bus import Bus, BusError
from libs.telemetry import setup_tracing
from schemas import HealthReply, HealthRequest, subjects


async def _ready(bus: Bus, subject: str, timeout_s: float) -> bool:
    try:
        reply = await bus.request(subject, HealthRequest(), HealthReply, timeout=timeout_s)
    except (BusError, TimeoutError):
        return False
    return reply.ok


async def _wait(nats_url: str, names: dict[str, str], timeout_s: float, check: Callable[[], None]) -> None:
    bus = await Bus.connect(nats_url, "cli", uuid.uuid4().hex[:6], setup_tracing("cli"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        missing = list(names)
        while True:
            check()
            oks = await asyncio.gather(*(_ready(bus, names[s], 1.0) for s in missing))
            missing = [s for s, ok in zip(missing, oks, strict=True) if not ok]
            if not missing:
                return
            if loop.time() >= deadline:
                raise TimeoutError(f"not ready within {timeout_s}s: {', '.join(missing)}")
            await asyncio.sleep(0.2)
    finally:
        await bus.close()


def wait_stages_ready(
    nats_url: str,
    stages: list[str],
    timeout_s: float,
    check: Callable[[], None],
    replicas: list[tuple[str, str]] | None = None,
) -> None:
    """Until every stage answers `health.<stage>`, and each named (stage, replica) its own
    `health.<stage>.<replica>`; `check` is called between rounds and may raise to give up."""
    names = {s: subjects.health(s) for s in stages}
    names.update({f"{s}-{r}": subjects.health_of(s, r) for s, r in replicas or []})
    asyncio.run(_wait(nats_url, names, timeout_s, check))
