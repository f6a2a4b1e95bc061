"""Durable JetStream pull consumers, so that services never touch nats-py types.

`BatchConsumer` fetches batches and hands them to a handler as `Delivery`s, which the handler
acks, naks or terminates; `DurableConsumer` is the per-message form on top of it (typed model
in, ack after the handler returns).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import BaseModel, ValidationError

from switchyard.libs.bus.bus import Bus

log = structlog.get_logger()
Handler = Callable[[str, BaseModel], Awaitable[None]]


@dataclass
class Delivery:
    """One fetched message: its subject, bytes, headers and delivery count, and how to settle it."""

    subject: str
    data: bytes
    headers: dict[str, str]
    num_delivered: int
    _msg: Msg = field(repr=False)

    @classmethod
    def of(cls, msg: Msg) -> Delivery:
        return cls(msg.subject, msg.data, dict(msg.headers or {}), msg.metadata.num_delivered, msg)

    async def ack(self) -> None:
        await self._msg.ack()

    async def nak(self, delay: float) -> None:
        """Deliver again after `delay` seconds."""
        await self._msg.nak(delay=delay)

    async def term(self) -> None:
        """Never deliver again (it can never succeed)."""
        await self._msg.term()


BatchHandler = Callable[[list[Delivery]], Awaitable[None]]


class BatchConsumer:
    """Feeds every message of `filter_subject` to `handler` in batches, once per durable name.

    The handler settles each delivery; one it leaves unsettled comes back after `ack_wait_s`
    (as after a crash mid-batch). `stop` lets the batch in hand finish, so it is settled."""

    def __init__(
        self,
        bus: Bus | JetStreamContext,
        stream: str,
        filter_subject: str,
        durable: str,
        handler: BatchHandler,
        *,
        batch: int = 64,
        fetch_timeout_s: float = 1.0,
        ack_wait_s: float = 30.0,
        max_ack_pending: int | None = None,
        stop_timeout_s: float | None = None,
        linger_s: float = 0.0,
    ):
        # A service passes its Bus, so it never holds nats-py's JetStream context itself.
        self._js = bus.js if isinstance(bus, Bus) else bus
        self._stream = stream
        self._filter = filter_subject
        self._durable = durable
        self._handler = handler
        self._batch = batch
        self._fetch_timeout = fetch_timeout_s
        self._ack_wait = ack_wait_s
        self._max_ack_pending = max_ack_pending or batch * 4
        self._stop_timeout = stop_timeout_s
        # After a batch that was not full, wait this long before the next fetch, so the next one is bigger:
        # a request's records then arrive a little later but in fewer, larger batches (the logger's cost
        # is per batch and per request in it, not per record).
        self._linger = linger_s
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._sub: JetStreamContext.PullSubscription | None = None

    async def start(self) -> None:
        self._sub = await self._js.pull_subscribe(
            self._filter,
            durable=self._durable,
            stream=self._stream,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=self._ack_wait,
                max_ack_pending=self._max_ack_pending,
            ),
        )
        self._task = asyncio.create_task(self._run(self._sub), name=f"consume-{self._durable}")

    async def _run(self, sub: JetStreamContext.PullSubscription) -> None:
        # Invariant: every batch fetched has been handed to the handler before the next fetch.
        while not self._stop.is_set():
            try:
                msgs = await sub.fetch(self._batch, timeout=self._fetch_timeout)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except Exception as e:  # reconnecting: try again shortly
                if self._stop.is_set():
                    break
                log.warning("durable fetch failed", durable=self._durable, error=str(e))
                await asyncio.sleep(self._fetch_timeout)
                continue
            await self._handler([Delivery.of(m) for m in msgs])
            if self._linger and len(msgs) < self._batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._linger)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, self._stop_timeout)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()


class DurableConsumer:
    """Handles every message of `filter_subject` once per durable name, across restarts.

    The handler gets (subject, decoded model); a message whose handler raises is redelivered later,
    one that does not decode is acknowledged and skipped (it would never decode)."""

    def __init__(
        self,
        bus: Bus | JetStreamContext,
        stream: str,
        filter_subject: str,
        durable: str,
        decode: Callable[[str, bytes], BaseModel],
        handler: Handler,
        batch: int = 64,
    ):
        self._decode = decode
        self._handler = handler
        self._durable = durable
        self._consumer = BatchConsumer(
            bus, stream, filter_subject, durable, self._handle, batch=batch, stop_timeout_s=5.0
        )

    async def start(self) -> None:
        await self._consumer.start()

    async def _handle(self, batch: list[Delivery]) -> None:
        # Invariant: every delivery before the current one is acked (handled or undecodable) or
        # nak'ed (handler failed).
        for d in batch:
            try:
                item = self._decode(d.subject, d.data)
            except ValidationError:
                await d.ack()
                continue
            try:
                await self._handler(d.subject, item)
            except Exception:
                log.exception("durable handler failed", durable=self._durable)
                await d.nak(delay=2.0)
                continue
            await d.ack()

    async def stop(self) -> None:
        await self._consumer.stop()
