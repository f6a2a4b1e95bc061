"""OpenTelemetry tracing and structlog JSON logging shared by every service."""

from libs.telemetry.logging import configure_logging
from libs.telemetry.tracing import NatsSpanExporter, Telemetry, setup_tracing

__all__ = ["NatsSpanExporter", "Telemetry", "configure_logging", "setup_tracing"]
