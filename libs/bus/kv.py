"""Typed JetStream key-value buckets (replica heartbeats, shared rate-limit counters)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import nats
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


async def open_bucket(js: JetStreamContext, bucket: str, ttl_s: float | None = None, replicas: int = 1) -> KeyValue:
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            return await js.create_key_value(KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, replicas=replicas))
        except nats.js.errors.BadRequestError:  # another service created it first
            return await js.key_value(bucket)


class TypedKV(Generic[M]):
    def __init__(self, kv: KeyValue, model: type[M]):
        self._kv = kv
        self._model = model
        self._watch: asyncio.Task[None] | None = None
        self._watcher: KeyValue.KeyWatcher | None = None

    async def put(self, key: str, value: M) -> int:
        return int(await self._kv.put(key, value.model_dump_json().encode()))

    async def delete(self, key: str) -> None:
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self._kv.delete(key)

    async def get(self, key: str) -> M | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return self._model.model_validate_json(entry.value) if entry.value else None

    async def watch(self, on_change: Callable[[str, M | None], Awaitable[None]]) -> None:
        """Calls `on_change(key, value)` for every current and later value; `None` when a key is deleted."""
        watcher = self._watcher = await self._kv.watchall()

        async def run() -> None:
            async for entry in watcher:
                if entry is None:  # the marker after the initial values
                    continue
                if entry.operation in (KV_DEL, KV_PURGE) or not entry.value:
                    await on_change(entry.key, None)
                else:
                    await on_change(entry.key, self._model.model_validate_json(entry.value))

        self._watch = asyncio.create_task(run())

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def close(self) -> None:
        """Stop watching and end the watch's subscription, so a draining connection need not wait on it."""
        self.stop()
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
            self._watcher = None
