from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.embeddings.model import Dtype


class SafetyOutSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_SAFETY_OUT_")

    # Characters held back beyond the safe cut (0: release every word as soon as redaction allows).
    holdback_chars: int = 0
    # Judge finished sentences with the learned classifier too (rules alone otherwise).
    use_embeddings: bool = True
    # The classifier's flag and block bars per category (None: the shipped calibration.json, which
    # `python -m training.safety.eval --calibrate` writes; docs/safety.md).
    calibration: Path | None = None
    # Let answer chunks exit the classifier after its first layer where a distilled head clears them as plainly
    # benign (the rest go on through the whole model in the same pass, and every flag and block is still
    # MiniLM's): 1.6-1.7x less classifier CPU per answer token, and every answer figure of the safety eval
    # kept (docs/safety.md, "The answer check's early exit"). Off: the classifier reads every chunk whole.
    screen: bool = True
    # Judge each answer sentence after the end of the user's question. Off by default: after an unrelated
    # benign question, harmful answers are stopped far less often (docs/safety.md), which is what a
    # jailbreak would exploit; on, a dosing step after a question about a child's fever passes.
    judge_with_question: bool = False
    # Most sentences one classifier pass takes; more wait for the next pass.
    max_batch_texts: int = 64
    # A stream with no end by then is closed with deadline_exceeded, when the request carries no deadline.
    default_stream_timeout_s: float = 300.0
    # How long saving a turn may take, asked again while context does not answer (it restarts, or the bus
    # reconnects): the client's `done` waits at most this for it. It has its own deadline, not the
    # request's (which may have passed). A restart of context within it loses no answer (docs/security.md).
    save_timeout_s: float = Field(60.0, gt=0)
    # One try's wait for context's answer within that bound.
    save_attempt_s: float = Field(5.0, gt=0)
    # How long input safety may take to judge the user's text (it runs while the model prefills).
    input_check_timeout_s: float = 10.0
    # Classifier passes run this many nice steps below the token path and the engine, on this many
    # torch threads: on a shared 2-core machine the engine keeps its core (docs/benchmarks.md).
    classifier_nice: int = 10
    classifier_threads: int = 1
    # What the classifier's MiniLM runs in (libs/embeddings/model.py, `auto_dtype`; int8 loses blocks on the
    # safety eval: docs/safety.md, "Precision at run time").
    classifier_dtype: Dtype = "auto"
    # The kept copy of a relayed stream's text (`chat.events.<rid>.kept`, read only by resuming) goes out as one
    # message per stream per this interval instead of one per release: a resume following the stream live
    # lags the relay by at most this much, and a replica lost mid-answer loses at most this much of the copy
    # (text its relaying gateway had; the stream ends in an error then anyway). 0: one message per release.
    kept_interval_s: float = Field(0.2, ge=0)
    # A stream quiet this long has its inference replica asked whether it lives; a dead one ends the
    # stream with `unavailable` at once (partial answer kept), not at the deadline.
    producer_idle_s: float = 1.0
    producer_check_period_s: float = 0.25
    producer_probe_s: float = 0.5
