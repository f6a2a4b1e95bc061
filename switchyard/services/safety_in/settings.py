from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.embeddings.model import Dtype


class SafetyInSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_SAFETY_IN_")

    # The learned classifier needs the embedding model; rules alone start instantly.
    use_embeddings: bool = True
    # The classifier's flag and block bars per category (None: the shipped calibration.json, which
    # `python -m training.safety.eval --calibrate` writes; docs/safety.md).
    calibration: Path | None = None
    # Most pieces (chunks of at most 900 characters) one classifier pass reads. Waiting requests share a
    # pass round-robin, so none waits on another's for more than one pass (docs/security.md).
    max_batch_texts: int = Field(64, ge=1)
    # Per request, the classifier reads the newest this many client messages (the new text first); the
    # rules read every message whole.
    classifier_max_messages: int = Field(16, ge=1)
    # Per message, the classifier reads at most this many pieces, from its start and its end.
    classifier_max_chunks: int = Field(8, ge=2)
    # Classifier passes run this many nice steps below the token path and the engine, on this many
    # torch threads: on a shared 2-core machine the engine keeps its core (docs/benchmarks.md).
    classifier_nice: int = 10
    classifier_threads: int = 1
    # What the classifier's MiniLM runs in (libs/embeddings/model.py, `auto_dtype`; int8 loses blocks on the
    # safety eval: docs/safety.md, "Precision at run time").
    classifier_dtype: Dtype = "auto"
