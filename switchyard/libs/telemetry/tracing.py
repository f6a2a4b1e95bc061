"""Tracing: OTLP when the service's settings name an endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`), and always a NATS exporter that hands
finished spans to the logger through JetStream (`log.spans`), so the console needs no other software."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from switchyard.schemas import SpanBatch, SpanRecord

Publish = Callable[[SpanBatch], Coroutine[Any, Any, None]]


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, Sequence):
        return [_jsonable(v) for v in value]
    return str(value)


def to_record(span: ReadableSpan) -> SpanRecord:
    ctx = span.get_span_context()
    assert ctx is not None
    attrs = {k: _jsonable(v) for k, v in (span.attributes or {}).items()}
    service = str(span.resource.attributes.get("service.name", "unknown"))
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        parent_id=format(span.parent.span_id, "016x") if span.parent else None,
        name=span.name,
        service=service,
        kind=span.kind.name.lower(),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        status=span.status.status_code.name.lower(),
        attributes=attrs,
        events=[
            {
                "name": e.name,
                "time_ns": e.timestamp,
                "attributes": {k: _jsonable(v) for k, v in (e.attributes or {}).items()},
            }
            for e in span.events
        ],
        rid=str(attrs["switchyard.rid"]) if "switchyard.rid" in attrs else None,
    )


class NatsSpanExporter(SpanExporter):
    """Runs in the batch processor's thread; hands each batch to the bus's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, publish: Publish, timeout_s: float = 5.0):
        self._loop = loop
        self._publish = publish
        self._timeout = timeout_s

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        batch = SpanBatch(spans=[to_record(s) for s in spans])
        if self._loop.is_closed():
            return SpanExportResult.FAILURE
        fut = asyncio.run_coroutine_threadsafe(self._publish(batch), self._loop)
        try:
            fut.result(self._timeout)
        except Exception:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@dataclass
class Telemetry:
    provider: TracerProvider
    service: str

    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer(f"switchyard.{self.service}")

    def attach_nats(self, loop: asyncio.AbstractEventLoop, publish: Publish) -> None:
        self.provider.add_span_processor(
            BatchSpanProcessor(NatsSpanExporter(loop, publish), schedule_delay_millis=500, max_export_batch_size=256)
        )

    async def shutdown(self) -> None:
        # The NATS exporter waits on the event loop, so flushing must not block the loop itself.
        await asyncio.to_thread(self.provider.force_flush, 5000)
        await asyncio.to_thread(self.provider.shutdown)


def otlp_traces_url(endpoint: str) -> str:
    """The traces URL under an OTLP/HTTP base endpoint, as the exporter derives it from the variable."""
    return endpoint.rstrip("/") + "/v1/traces"


def setup_tracing(service: str, otlp_endpoint: str | None = None) -> Telemetry:
    """`otlp_endpoint`: the collector's OTLP/HTTP base URL (`ServiceSettings.otlp_endpoint`); None exports
    over NATS only."""
    provider = TracerProvider(resource=Resource.create({"service.name": service, "service.namespace": "switchyard"}))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url(otlp_endpoint))))
    return Telemetry(provider=provider, service=service)
