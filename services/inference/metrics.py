"""Prometheus view of the engine: polled, so the engine never depends on the metrics library."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import Gauge, start_http_server

from libs.engine import AsyncEngine

_G = {
    "running": Gauge("switchyard_engine_running", "Sequences decoding"),
    "waiting": Gauge("switchyard_engine_waiting", "Sequences queued for prefill"),
    "kv_blocks_used": Gauge("switchyard_engine_kv_blocks_used", "KV cache blocks in use"),
    "kv_blocks_free": Gauge("switchyard_engine_kv_blocks_free", "KV cache blocks free"),
    "prefix_cache_queries_tokens": Gauge("switchyard_engine_prefix_cache_queries_tokens", "Prompt tokens looked up"),
    "prefix_cache_hits_tokens": Gauge("switchyard_engine_prefix_cache_hits_tokens", "Prompt tokens served from cache"),
    "preemptions": Gauge("switchyard_engine_preemptions", "Sequences preempted for lack of blocks"),
    "last_batch_size": Gauge("switchyard_engine_batch_size", "Sequences in the last engine step"),
    "max_batch_size_seen": Gauge("switchyard_engine_max_batch_size", "Largest batch stepped so far"),
    "generated_tokens": Gauge("switchyard_engine_generated_tokens", "Output tokens generated"),
}


def start_metrics_server(port: int) -> None:
    start_http_server(port, addr="127.0.0.1")


class EngineGauges:
    def __init__(self, engine: AsyncEngine, period_s: float = 1.0):
        self.engine = engine
        self.period_s = period_s
        self._task: asyncio.Task[None] | None = None

    def update(self) -> None:
        m = self.engine.metrics()
        for name, gauge in _G.items():
            gauge.set(float(getattr(m, name, 0) or 0))

    async def _run(self) -> None:
        while True:
            self.update()
            await asyncio.sleep(self.period_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(Exception):
                self._task = None
