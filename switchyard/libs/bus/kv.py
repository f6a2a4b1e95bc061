"""JetStream key-value buckets: typed and watched (replica heartbeats, key standing), or raw values
updated by compare-and-set (shared rate-limit counters)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import nats
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, KeyValueConfig
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue
from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from switchyard.libs.bus.bus import Bus

M = TypeVar("M", bound=BaseModel)
log = structlog.get_logger()
# A watch is a consumer on one server; when that server dies, nats-py makes a new one after two
# missed idle heartbeats. At its default (5 s) a router in a 3-node cluster heard no inference
# heartbeat for 10-20 s and called every replica dead; at 1 s the watch is back within a few seconds.
WATCH_HEARTBEAT_S = 1.0
LEADER_WAIT_S = 10.0


async def open_bucket(js: JetStreamContext, bucket: str, ttl_s: float | None = None, replicas: int = 1) -> KeyValue:
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            kv = await js.create_key_value(KeyValueConfig(bucket=bucket, ttl=ttl_s, history=1, replicas=replicas))
        except nats.js.errors.BadRequestError:  # another service created it first
            kv = await js.key_value(bucket)
        await until_led(js, f"KV_{bucket}")
        return kv


async def until_led(js: JetStreamContext, stream: str, timeout_s: float = LEADER_WAIT_S) -> None:
    """Wait until a replicated `stream` has a leader: a stream just created in a cluster answers a write
    with "no responders" until its replicas have elected one. Gives up after `timeout_s` (a write then
    fails with its own error)."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await js.stream_info(stream)
        if info.cluster is None or info.cluster.leader or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.05)  # an election has no event to wait on


class TypedKV(Generic[M]):
    def __init__(self, kv: KeyValue, model: type[M], js: JetStreamContext, bucket: str):
        self._kv = kv
        self._model = model
        self._js = js
        self._bucket = bucket
        self._watch: Any = None  # the watch's subscription
        self._watching = False

    async def put(self, key: str, value: M) -> int:
        return int(await self._kv.put(key, value.model_dump_json().encode()))

    async def create(self, key: str, value: M) -> bool:
        """Write `value` only where `key` has none; False when it has one already."""
        try:
            await self._kv.create(key, value.model_dump_json().encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def delete(self, key: str) -> None:
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            await self._kv.delete(key)

    async def items(self) -> dict[str, M]:
        """Every current entry, by key (a snapshot; `watch` follows the changes)."""
        try:
            keys = await self._kv.keys()
        except nats.js.errors.NoKeysError:
            return {}
        found: dict[str, M] = {}
        for key in keys:
            value = await self.get(key)
            if value is not None:
                found[key] = value
        return found

    async def get(self, key: str) -> M | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return self._model.model_validate_json(entry.value) if entry.value else None

    async def watch(self, on_change: Callable[[str, M | None], Awaitable[None]]) -> None:
        """Calls `on_change(key, value)` for every current and later value; `None` when a key is deleted.

        nats-py's own KV watch cannot set the consumer's heartbeat, so this is its ordered consumer
        with a short one (`WATCH_HEARTBEAT_S`)."""
        prefix = f"$KV.{self._bucket}."
        self._watching = True

        async def on_msg(msg: Msg) -> None:
            if not self._watching:
                return
            key = msg.subject[len(prefix) :]
            if (msg.headers or {}).get(KV_OP) in (KV_DEL, KV_PURGE) or not msg.data:
                await on_change(key, None)
                return
            try:
                value = self._model.model_validate_json(msg.data)
            except ValidationError:
                log.warning("undecodable value", bucket=self._bucket, key=key)
                return
            await on_change(key, value)

        self._watch = await self._js.subscribe(
            f"{prefix}>",
            stream=f"KV_{self._bucket}",
            cb=on_msg,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            idle_heartbeat=WATCH_HEARTBEAT_S,
            inactive_threshold=300.0,
        )

    def stop(self) -> None:
        """No more calls to the watch's `on_change`; `close` ends its subscription."""
        self._watching = False

    async def close(self) -> None:
        """Stop watching and end the watch's subscription, so a draining connection need not wait on it."""
        self.stop()
        if self._watch is not None:
            with contextlib.suppress(Exception):
                await self._watch.unsubscribe()
            self._watch = None


class CasKV:
    """Raw values that writers update by compare-and-set on the entry's revision: two writers that race
    both read, one write wins, the other re-reads and tries again."""

    def __init__(self, kv: KeyValue):
        self._kv = kv

    @classmethod
    async def open(cls, bus: Bus, bucket: str, ttl_s: float | None = None, replicas: int | None = None) -> CasKV:
        """`replicas`: nodes that keep the bucket (the bus's own count when None)."""
        return cls(await open_bucket(bus.js, bucket, ttl_s, bus.js_replicas if replicas is None else replicas))

    async def get(self, key: str) -> tuple[bytes | None, int]:
        """The value and its revision; (None, 0) when there is none."""
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None, 0
        return entry.value, entry.revision or 0

    async def put_if(self, key: str, value: bytes, revision: int) -> bool:
        """Write `value` if the entry is still at `revision` (0: if there is none yet); False if another
        writer changed it first."""
        return await self.swap(key, value, revision) is not None

    async def swap(self, key: str, value: bytes, revision: int) -> int | None:
        """`put_if` that returns the entry's new revision, or None where another writer changed it first."""
        try:
            if revision == 0:
                return int(await self._kv.create(key, value))
            return int(await self._kv.update(key, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
