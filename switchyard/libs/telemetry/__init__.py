"""OpenTelemetry tracing and structlog JSON logging shared by every service."""

from switchyard.libs.telemetry.logging import configure_logging
from switchyard.libs.telemetry.tracing import NatsSpanExporter, Telemetry, setup_tracing

__all__ = ["NatsSpanExporter", "Telemetry", "configure_logging", "setup_tracing"]
