"""The durable pull consumer on JetStream `LOG`: fetch a batch, write it in one transaction, then ack.

Acking only after the commit means a crash loses nothing (the batch is redelivered), and since every
write is idempotent a redelivered message changes nothing. The consumer never opens a span while it
handles `log.spans`: each span it made would come back as another span batch, forever.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import nats
import structlog
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from libs.bus import Bus
from libs.bus import headers as H
from libs.store.records import Item, RecordStore
from schemas import Feedback, SpanBatch, StageRecord, subjects
from schemas.records import LOG_FEEDBACK
from services.logger.settings import LoggerSettings

log = structlog.get_logger()


def parse(msg: Msg) -> Item:
    if msg.subject == subjects.LOG_SPANS:
        return SpanBatch.model_validate_json(msg.data)
    if msg.subject == LOG_FEEDBACK:
        return Feedback.model_validate_json(msg.data)
    return StageRecord.model_validate_json(msg.data)


@dataclass
class Parsed:
    msg: Msg
    item: Item


class LogConsumer:
    def __init__(self, bus: Bus, store: RecordStore, settings: LoggerSettings):
        self.bus = bus
        self.store = store
        self.settings = settings
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sub: nats.js.JetStreamContext.PullSubscription | None = None
        self.written = 0

    async def start(self) -> None:
        await self.bus.ensure_log_stream()
        self._sub = await self.bus.js.pull_subscribe(
            subjects.LOG_SUBJECTS,
            durable=self.settings.durable,
            stream=subjects.LOG_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=self.settings.ack_wait_s,
                max_ack_pending=self.settings.batch * 4,
            ),
        )
        self._task = asyncio.create_task(self._run(), name="logger-consume")

    async def stop(self) -> None:
        """Finish the batch in hand (so it is acked), then stop fetching."""
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass

    async def _run(self) -> None:
        assert self._sub is not None
        # Invariant: every message acked so far is committed in the store; everything else is either
        # in the batch in hand or still in the stream, where it will be delivered again.
        while not self._stop.is_set():
            try:
                msgs = await self._sub.fetch(self.settings.batch, timeout=self.settings.fetch_timeout_s)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except Exception as e:
                if self._stop.is_set():
                    break
                log.warning("log fetch failed", error=str(e))
                await asyncio.sleep(self.settings.fetch_timeout_s)
                continue
            await self.handle(msgs)

    async def handle(self, msgs: list[Msg]) -> None:
        batch: list[Parsed] = []
        for m in msgs:
            try:
                batch.append(Parsed(m, parse(m)))
            except ValidationError as e:
                log.error("unreadable log message dropped", subject=m.subject, error=str(e)[:300])
                await m.term()
        if not batch:
            return
        spans = self._consumer_spans(batch)
        try:
            await self.store.apply([p.item for p in batch])
        except Exception:
            log.exception("log batch not written; retrying one by one", size=len(batch))
            await self._one_by_one(batch)
        else:
            for p in batch:
                await p.msg.ack()
            self.written += len(batch)
        finally:
            for span in spans:
                span.end()

    async def _one_by_one(self, batch: list[Parsed]) -> None:
        """One bad message must not hold back the rest: write each alone, retry or drop the failures."""
        for p in batch:
            try:
                await self.store.apply([p.item])
            except Exception as e:
                delivered = p.msg.metadata.num_delivered
                if delivered >= self.settings.max_deliver:
                    log.error("log message dropped after retries", subject=p.msg.subject, error=str(e)[:300])
                    await p.msg.term()
                else:
                    await p.msg.nak(delay=min(30.0, 0.5 * 2**delivered))
            else:
                await p.msg.ack()
                self.written += 1

    def _consumer_spans(self, batch: list[Parsed]) -> list[trace.Span]:
        """One span per stage record, a child of the request's trace: the logger joins each trace."""
        out: list[trace.Span] = []
        for p in batch:
            if not isinstance(p.item, StageRecord):
                continue  # never for spans (a feedback loop) nor feedback
            ctx = H.extract_trace(dict(p.msg.headers or {}))
            out.append(
                self.bus.tracer.start_span(
                    f"store {p.msg.subject}",
                    context=ctx,
                    kind=SpanKind.CONSUMER,
                    attributes={
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                        "messaging.destination.name": p.msg.subject,
                        "switchyard.rid": p.item.rid,
                        "switchyard.service": self.bus.service,
                        "switchyard.batch_size": len(batch),
                    },
                )
            )
        return out
