from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.bus import ServiceSettings
from libs.store.db import database_url


class LoggerSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_LOGGER_")

    # None: a SQLite file `<data_dir>/logger.db`.
    database_url: str | None = None
    # Replicas sharing this durable consumer share the stream's work; a new name re-reads the stream.
    durable: str = "logger"
    batch: int = 256
    fetch_timeout_s: float = 1.0
    # Unacked messages come back after this long (a replica died mid-batch).
    ack_wait_s: float = 30.0
    # A message that fails this many deliveries is dropped (logged), so it cannot block the stream.
    max_deliver: int = 10

    def db_url(self) -> str:
        return database_url(self.database_url, self.data_dir, "logger")
