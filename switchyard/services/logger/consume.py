"""The durable pull consumer on JetStream `LOG`: fetch a batch, write it in one transaction, then ack.

Acking only after the commit means a crash loses nothing (the batch is redelivered), and since every
write is idempotent a redelivered message changes nothing. The consumer never opens a span while it
handles `log.spans`: each span it made would come back as another span batch, forever.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from switchyard.libs.bus import Bus
from switchyard.libs.bus import headers as H
from switchyard.libs.bus.durable import BatchConsumer, Delivery
from switchyard.libs.store.records import Item, RecordStore
from switchyard.schemas import Feedback, SpanBatch, StageRecord, subjects
from switchyard.schemas.subjects import LOG_FEEDBACK
from switchyard.services.logger.settings import LoggerSettings

log = structlog.get_logger()


def parse(msg: Delivery) -> Item:
    if msg.subject == subjects.LOG_SPANS:
        return SpanBatch.model_validate_json(msg.data)
    if msg.subject == LOG_FEEDBACK:
        return Feedback.model_validate_json(msg.data)
    return StageRecord.model_validate_json(msg.data)


@dataclass
class Parsed:
    msg: Delivery
    item: Item


class LogConsumer:
    def __init__(self, bus: Bus, store: RecordStore, settings: LoggerSettings):
        self.bus = bus
        self.store = store
        self.settings = settings
        self._consumer: BatchConsumer | None = None

    async def start(self) -> None:
        await self.bus.ensure_log_stream()
        s = self.settings
        self._consumer = BatchConsumer(
            self.bus,
            subjects.LOG_STREAM,
            subjects.LOG_SUBJECTS,
            s.durable,
            self.handle,
            batch=s.batch,
            fetch_timeout_s=s.fetch_timeout_s,
            ack_wait_s=s.ack_wait_s,
            linger_s=s.linger_s,
        )
        await self._consumer.start()

    async def stop(self) -> None:
        """Finish the batch in hand (so it is acked), then stop fetching."""
        if self._consumer is not None:
            await self._consumer.stop()

    async def handle(self, msgs: list[Delivery]) -> None:
        # Invariant: every message acked so far is committed in the store; everything else is either
        # in the batch in hand or still in the stream, where it will be delivered again.
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
        finally:
            for span in spans:
                span.end()

    async def _one_by_one(self, batch: list[Parsed]) -> None:
        """One bad message must not hold back the rest: write each alone, retry or drop the failures."""
        for p in batch:
            try:
                await self.store.apply([p.item])
            except Exception as e:
                delivered = p.msg.num_delivered
                if delivered >= self.settings.max_deliver:
                    log.error("log message dropped after retries", subject=p.msg.subject, error=str(e)[:300])
                    await p.msg.term()
                else:
                    await p.msg.nak(delay=min(30.0, 0.5 * 2**delivered))
            else:
                await p.msg.ack()

    def _consumer_spans(self, batch: list[Parsed]) -> list[trace.Span]:
        """One span per request in the batch, a child of the trace of its first stage record there: the
        logger joins each trace once per write, not once per record (each span it makes comes back to it
        as a span to store, so a span per record cost as much as the records)."""
        by_rid: dict[str, list[Parsed]] = {}
        for p in batch:
            if isinstance(p.item, StageRecord):  # never for spans (a feedback loop) nor feedback
                by_rid.setdefault(p.item.rid, []).append(p)
        out: list[trace.Span] = []
        for rid, records in by_rid.items():
            first = records[0].msg
            out.append(
                self.bus.tracer.start_span(
                    f"store {subjects.LOG_STREAM}",
                    context=H.extract_trace(first.headers),
                    kind=SpanKind.CONSUMER,
                    attributes={
                        "messaging.system": "nats",
                        "messaging.operation.type": "process",
                        "messaging.destination.name": subjects.LOG_STREAM,
                        "messaging.batch.message_count": len(records),
                        "switchyard.subjects": [r.msg.subject for r in records],
                        "switchyard.rid": rid,
                        "switchyard.service": self.bus.service,
                        "switchyard.batch_size": len(batch),
                    },
                )
            )
        return out
