from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.bus import ServiceSettings


class SafetyInSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_SAFETY_IN_")

    # The learned classifier needs the embedding model; rules alone start instantly.
    use_embeddings: bool = True
    # Most texts one classifier pass takes; more wait for the next pass.
    max_batch_texts: int = 64
    # Classifier passes run this many nice steps below the token path and the engine, on this many
    # torch threads: on a shared 2-core machine the engine keeps its core (docs/benchmarks.md).
    classifier_nice: int = 10
    classifier_threads: int = 1
