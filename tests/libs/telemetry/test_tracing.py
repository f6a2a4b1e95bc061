"""OTLP export is configured by the service's settings, not by reading the environment in the library."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.telemetry import setup_tracing
from tests.http_server import serve_http


class _Collector(BaseHTTPRequestHandler):
    paths: list[str] = []
    posted = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).paths.append(self.path)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()
        type(self).posted.set()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.paths, _Collector.posted = [], threading.Event()
    with serve_http(_Collector) as url:
        yield url


def test_the_otlp_endpoint_is_a_shared_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert ServiceSettings().otlp_endpoint == "http://collector:4318"
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert ServiceSettings().otlp_endpoint is None


def test_spans_go_to_the_configured_collector(collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    telemetry = setup_tracing("probe", collector + "/")
    with telemetry.tracer().start_as_current_span("work"):
        pass
    assert telemetry.provider.force_flush(10_000)
    assert _Collector.posted.wait(10)
    assert _Collector.paths == ["/v1/traces"]
    telemetry.provider.shutdown()


def test_no_endpoint_exports_over_nats_only(collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The variable set but not passed: the library must not pick it up on its own.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
    telemetry = setup_tracing("probe")
    with telemetry.tracer().start_as_current_span("work"):
        pass
    assert telemetry.provider.force_flush(10_000)
    telemetry.provider.shutdown()
    assert _Collector.paths == []
