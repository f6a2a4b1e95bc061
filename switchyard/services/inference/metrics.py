"""Prometheus view of one inference replica, under the names vLLM users already chart.

Request figures (time to first token, inter-token latency, end-to-end latency, finish reasons, token
counts) are observed as each engine request streams through `MeteredEngine`; engine state (running,
waiting, KV usage, prefix cache, preemptions) is read from `engine.metrics()` when scraped. So the
engine never depends on the metrics library, and a scrape always sees the state of that moment.

Buckets and label names follow vLLM's `vllm/v1/metrics/loggers.py`, so its dashboards work unchanged.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterator
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from switchyard.libs.engine import AsyncEngine, EngineMetrics, SamplingParams, StreamChunk
from switchyard.libs.tokenizer import Tokenizer

# vLLM labels every series with the served model name and the engine index; a replica has one engine.
LABELS = ("model_name", "engine")
ENGINE_INDEX = "0"

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
TOKEN_LATENCY_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0),
    *(40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
# The engine's finish reasons in vLLM's words (vLLM calls a cancelled request aborted).
FINISHED_REASONS = {"stop": "stop", "length": "length", "cancelled": "abort", "error": "error"}


def token_count_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value`: vLLM's buckets for per-request token counts."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(float(m * scale))
        scale *= 10


class EngineState(Collector):
    """The engine's own counters and gauges, read at scrape time (the HTTP server's thread)."""

    def __init__(self, engine: AsyncEngine, model_name: str):
        self.engine = engine
        self.labels = [model_name, ENGINE_INDEX]

    def _vllm(self, m: EngineMetrics) -> Iterator[Metric]:
        total_blocks = m.kv_blocks_used + m.kv_blocks_free
        series: list[tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str, float]] = [
            (
                GaugeMetricFamily,
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                m.running,
            ),
            (GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", m.waiting),
            (
                GaugeMetricFamily,
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                m.kv_blocks_used / total_blocks if total_blocks else 0.0,
            ),
            (
                CounterMetricFamily,
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                m.prefix_cache_queries_tokens,
            ),
            (
                CounterMetricFamily,
                "vllm:prefix_cache_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                m.prefix_cache_hits_tokens,
            ),
            (
                CounterMetricFamily,
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                m.preemptions,
            ),
        ]
        for family, name, doc, value in series:
            metric = family(name, doc, labels=LABELS)
            metric.add_metric(self.labels, float(value))
            yield metric

    @staticmethod
    def _switchyard(m: EngineMetrics) -> Iterator[Metric]:
        gauges = [
            ("running", "switchyard_engine_running", "Sequences decoding"),
            ("waiting", "switchyard_engine_waiting", "Sequences queued for prefill"),
            ("kv_blocks_used", "switchyard_engine_kv_blocks_used", "KV cache blocks in use"),
            ("kv_blocks_free", "switchyard_engine_kv_blocks_free", "KV cache blocks free"),
            ("prefix_cache_queries_tokens", "switchyard_engine_prefix_cache_queries_tokens", "Prompt tokens looked up"),
            (
                "prefix_cache_hits_tokens",
                "switchyard_engine_prefix_cache_hits_tokens",
                "Prompt tokens served from cache",
            ),
            ("preemptions", "switchyard_engine_preemptions", "Sequences preempted for lack of blocks"),
            ("last_batch_size", "switchyard_engine_batch_size", "Sequences in the last engine step"),
            ("max_batch_size_seen", "switchyard_engine_max_batch_size", "Largest batch stepped so far"),
            ("generated_tokens", "switchyard_engine_generated_tokens", "Output tokens generated"),
            ("steps", "switchyard_engine_steps", "Engine steps run"),
            ("wide_steps", "switchyard_engine_wide_steps", "Engine steps run on every core"),
        ]
        for field, name, doc in gauges:
            yield GaugeMetricFamily(name, doc, value=float(getattr(m, field)))

    def collect(self) -> Iterator[Metric]:
        m = self.engine.metrics()
        yield from self._vllm(m)
        yield from self._switchyard(m)


class RequestMeters:
    """Per-request histograms and counters, one set per replica (its own registry)."""

    def __init__(self, registry: CollectorRegistry, model_name: str, max_model_len: int):
        labels = (model_name, ENGINE_INDEX)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry).labels(*labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry).labels(*labels)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TOKEN_LATENCY_BUCKETS
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS
        )
        counts = token_count_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", counts
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", counts
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=registry,
        )
        # Every reason exists from the start (at 0), as in vLLM, so rate() works on the first request.
        self.finished = {reason: success.labels(*labels, reason) for reason in dict.fromkeys(FINISHED_REASONS.values())}

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def finished_request(self, chunk: StreamChunk, e2e_s: float) -> None:
        self.finished[FINISHED_REASONS.get(chunk.finish_reason or "error", "error")].inc()
        self.e2e.observe(e2e_s)
        u = chunk.usage
        if u is None:  # refused before it was queued (empty or over-long prompt)
            return
        self.prompt_tokens.inc(u.prompt_tokens)
        self.request_prompt_tokens.observe(u.prompt_tokens)
        self.request_generation_tokens.observe(u.completion_tokens)
        if u.tpot_s is not None:
            self.tpot.observe(u.tpot_s)


class MeteredEngine:
    """An AsyncEngine that observes every request it streams; all else is the wrapped engine's."""

    def __init__(self, engine: AsyncEngine, meters: RequestMeters):
        self.engine = engine
        self.meters = meters
        self.model_name: str = engine.model_name
        self.tokenizer: Tokenizer = engine.tokenizer
        self.max_model_len: int = engine.max_model_len

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()

    def cancel(self, request_id: str) -> None:
        self.engine.cancel(request_id)

    def metrics(self) -> EngineMetrics:
        return self.engine.metrics()

    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> AsyncGenerator[StreamChunk, None]:
        m = self.meters
        arrival = time.monotonic()
        last_token_at: float | None = None
        finished = False
        left = "abort"  # how a request that ends without its final chunk is counted
        stream = self.engine.generate(request_id, prompt, params)
        try:
            async for chunk in stream:
                if chunk.token_ids:
                    # The engine's own timestamp where it gives one, so a busy event loop skews nothing.
                    at = chunk.token_at if chunk.token_at is not None else time.monotonic()
                    later = len(chunk.token_ids)
                    if last_token_at is None:
                        m.first_token(at - arrival)
                        later -= 1
                    # Tokens of one merged chunk (a consumer a step behind) share its gap evenly.
                    for _ in range(later):
                        m.itl.observe((at - (last_token_at or at)) / max(later, 1))
                    last_token_at = at
                    m.generation_tokens.inc(len(chunk.token_ids))
                if chunk.finished:
                    finished = True
                    m.finished_request(chunk, time.monotonic() - arrival)
                yield chunk
        except Exception:
            left = "error"
            raise
        finally:
            if not finished:  # the consumer left early (the engine cancels the request) or the engine failed
                m.finished[left].inc()
                m.e2e.observe(time.monotonic() - arrival)
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()


class InferenceMetrics:
    """One replica's registry: the engine's state, its requests' figures, and the process itself."""

    def __init__(self, engine: AsyncEngine, model_name: str):
        self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.registry.register(EngineState(engine, model_name))
        self.engine = MeteredEngine(engine, RequestMeters(self.registry, model_name, engine.max_model_len))
        self._server: WSGIServer | None = None
        self._thread: Thread | None = None

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """`GET http://addr:port/metrics`, served from a daemon thread."""
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
