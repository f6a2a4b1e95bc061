from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.store.db import database_url


class LoggerSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_LOGGER_")

    # None: a SQLite file `<data_dir>/logger.db`.
    database_url: str | None = None
    # Replicas sharing this durable consumer share the stream's work; a new name re-reads the stream.
    durable: str = "logger"
    batch: int = 256
    fetch_timeout_s: float = 1.0
    # After a batch that was not full, this long before the next fetch: a request's records land in one
    # or two batches instead of one per stage (a record shows up this much later in the console).
    linger_s: float = 0.2
    # Unacked messages come back after this long (a replica died mid-batch).
    ack_wait_s: float = 30.0
    # A message that fails this many deliveries is dropped (logged), so it cannot block the stream.
    max_deliver: int = 10

    # Tenants whose raw text (prompts, outputs, tool results) is never stored: hashes and lengths instead.
    no_raw_text_tenants: list[str] = Field(default_factory=list)
    # Prompts and outputs older than this many days are scrubbed the same way; None keeps them.
    retention_days: float | None = None
    # Whole records (and their spans and feedback) older than this many days are deleted; None keeps them.
    record_retention_days: float | None = None
    purge_interval_s: float = 3600.0

    # Abuse detection (`abuse.py`), on its own durable consumer of the same stream.
    abuse_enabled: bool = True
    # Strikes (blocked requests, and flagged ones where the tenant's policy says so) of one key
    # within `abuse_window_s` that suspend it.
    abuse_threshold: int = 5
    abuse_window_s: float = 600.0
    abuse_durable: str = "abuse"

    def db_url(self) -> str:
        return database_url(self.database_url, self.data_dir, "logger")
