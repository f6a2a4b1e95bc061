"""Header names carried by every message, and the W3C trace-context bridge."""

from __future__ import annotations

import time

from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

RID = "x-rid"
DEADLINE = "x-deadline"  # epoch milliseconds
TENANT = "x-tenant"
STATUS = "x-status"  # "error" on an error reply
MSG_ID = "Nats-Msg-Id"
# "i/n" on each part of a message too big for one (see switchyard/libs/bus/parts.py)
PART = "x-part"

_propagator = TraceContextTextMapPropagator()


def now_ms() -> int:
    return int(time.time() * 1000)


def inject_trace(headers: dict[str, str]) -> None:
    _propagator.inject(headers)


def extract_trace(headers: dict[str, str]) -> otel_context.Context:
    return _propagator.extract(headers)
