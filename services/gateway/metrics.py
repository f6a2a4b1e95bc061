"""Prometheus metrics. Each app owns its registry, so two gateways in one test process stay apart."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "switchyard_gateway_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "switchyard_gateway_ttft_seconds",
            "Time from request to the first streamed event",
            ["api"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self.stream_duration = Histogram(
            "switchyard_gateway_stream_duration_seconds",
            "Duration of streams by outcome",
            ["api", "status"],
            buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 40, 80, 160),
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "switchyard_gateway_rate_limited", "Requests refused by a limit", ["limit"], registry=self.registry
        )
        self.active_streams = Gauge(
            "switchyard_gateway_active_streams", "Streams being relayed now", registry=self.registry
        )
        self.cancels = Counter(
            "switchyard_gateway_cancels", "Cancels published, by reason", ["reason"], registry=self.registry
        )
