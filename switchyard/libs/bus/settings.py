"""Settings every service shares; each service subclasses with its own env prefix."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    # NATS_URL is shared by every service, so it is read without the service's prefix.
    nats_url: str = Field("nats://127.0.0.1:4222", validation_alias=AliasChoices("NATS_URL", "nats_url"))
    # Copies JetStream keeps of the log stream and the KV buckets: 3 against a NATS cluster, so losing
    # a node loses no record. Shared like NATS_URL.
    nats_replicas: int = Field(1, ge=1, le=5, validation_alias=AliasChoices("NATS_REPLICAS", "nats_replicas"))
    log_level: str = Field("INFO", validation_alias=AliasChoices("SWITCHYARD_LOG_LEVEL", "log_level"))
    data_dir: str = Field("var", validation_alias=AliasChoices("SWITCHYARD_DATA_DIR", "data_dir"))
    replica: str | None = None
    # An OTLP/HTTP collector's base URL: spans go there too (the NATS exporter always runs). The
    # OpenTelemetry variable, read without the service's prefix.
    otlp_endpoint: str | None = Field(
        None, validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint")
    )
    # The process that started this one (`switchyard run` sets it): when it is gone, this one drains and
    # exits instead of living on as an orphan (a supervisor killed with SIGKILL cannot stop its children).
    supervisor_pid: int | None = Field(
        None, validation_alias=AliasChoices("SWITCHYARD_SUPERVISOR_PID", "supervisor_pid")
    )
    # Torch intra-op threads for this service's own model work (classifier, embeddings); 0 leaves torch's
    # default. One: beside a busy engine a MiniLM pass on two threads waits on the engine for its
    # second core and runs several times slower than on one, and the engine keeps its core
    # (docs/benchmarks.md, "Measurements behind the code's choices").
    torch_threads: int = Field(1, validation_alias=AliasChoices("SWITCHYARD_TORCH_THREADS", "torch_threads"))
