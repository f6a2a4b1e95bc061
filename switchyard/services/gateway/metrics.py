"""Prometheus metrics. Each app owns its registry, so two gateways in one test process stay apart."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "switchyard_gateway_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        # What the client waits for, pipeline included; the buckets are vLLM's TTFT buckets, so this
        # lines up with each replica's `vllm:time_to_first_token_seconds` and the difference is the pipeline's.
        self.ttft = Histogram(
            "switchyard_gateway_ttft_seconds",
            "Time from a request's arrival to the first answer text (delta or thinking) relayed to its client",
            ["api"],
            buckets=TTFT_BUCKETS,
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
