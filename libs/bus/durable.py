"""A small durable JetStream pull consumer: typed messages in, ack after the handler returns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import nats
import structlog
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import BaseModel, ValidationError

log = structlog.get_logger()
Handler = Callable[[str, BaseModel], Awaitable[None]]


class DurableConsumer:
    """Handles every message of `filter_subject` once per durable name, across restarts.

    The handler gets (subject, decoded model); a message whose handler raises is redelivered later,
    one that does not decode is acknowledged and skipped (it would never decode)."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        filter_subject: str,
        durable: str,
        decode: Callable[[str, bytes], BaseModel],
        handler: Handler,
        batch: int = 64,
    ):
        self._js = js
        self._stream = stream
        self._filter = filter_subject
        self._durable = durable
        self._decode = decode
        self._handler = handler
        self._batch = batch
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._sub: JetStreamContext.PullSubscription | None = None

    async def start(self) -> None:
        sub = await self._js.pull_subscribe(
            self._filter,
            durable=self._durable,
            stream=self._stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=30),
        )
        self._sub = sub
        self._task = asyncio.create_task(self._run(sub))

    async def _run(self, sub: JetStreamContext.PullSubscription) -> None:
        # Invariant: every message fetched is acked (handled or undecodable) or nak'ed (handler failed).
        while not self._stop.is_set():
            try:
                msgs = await sub.fetch(self._batch, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            except Exception as e:  # reconnecting: try again shortly
                log.warning("durable fetch failed", durable=self._durable, error=str(e))
                await asyncio.sleep(1.0)
                continue
            for msg in msgs:
                try:
                    item = self._decode(msg.subject, msg.data)
                except ValidationError:
                    await msg.ack()
                    continue
                try:
                    await self._handler(msg.subject, item)
                except Exception:
                    log.exception("durable handler failed", durable=self._durable)
                    await msg.nak(delay=2.0)
                    continue
                await msg.ack()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5.0)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
