from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.bus import ServiceSettings


class SafetyInSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_SAFETY_IN_")

    # The learned classifier needs the embedding model; rules alone start instantly.
    use_embeddings: bool = True
