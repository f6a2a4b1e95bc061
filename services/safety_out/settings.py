from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.bus import ServiceSettings


class SafetyOutSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_SAFETY_OUT_")

    # Characters held back so a redaction never arrives half-sent (released earlier at a sentence end).
    holdback_chars: int = 48
    # Classify each finished sentence with the learned classifier too (rules alone otherwise).
    use_embeddings: bool = True
    # A stream with no end by then is closed with deadline_exceeded, when the request carries no deadline.
    default_stream_timeout_s: float = 300.0
