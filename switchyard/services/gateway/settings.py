from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.constraints import GrammarLimits
from switchyard.libs.models import ModelRegistry
from switchyard.libs.store.db import database_url
from switchyard.schemas.plan import MAX_PRIORITY


class TierLimits(BaseModel):
    requests_per_minute: float
    tokens_per_minute: float
    concurrent_streams: int
    # The engine's scheduling priority of the tier's requests (lower is sooner; the request plan carries it).
    # A waiting request gains a level per SWITCHYARD_INFERENCE_PRIORITY_AGING_S (1 s): a tier 10 levels
    # behind waits behind the better tier's requests that arrive up to 10 s after it, never longer.
    priority: int = Field(0, ge=0, le=MAX_PRIORITY)


def _default_tiers() -> dict[str, TierLimits]:
    return {
        "free": TierLimits(requests_per_minute=20, tokens_per_minute=20_000, concurrent_streams=2, priority=10),
        "pro": TierLimits(requests_per_minute=600, tokens_per_minute=1_000_000, concurrent_streams=32, priority=0),
    }


class GatewaySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_GATEWAY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, validation_alias=AliasChoices("SWITCHYARD_PORT", "port"))
    dev_api_key: str | None = Field(None, validation_alias=AliasChoices("SWITCHYARD_API_KEY", "dev_api_key"))
    admin_api_key: str | None = Field(None, validation_alias=AliasChoices("SWITCHYARD_ADMIN_KEY", "admin_api_key"))
    database_url: str | None = None

    request_timeout_s: float = 120.0
    max_body_bytes: int = 1_000_000
    max_text_chars: int = 32_000
    # Input budget for one request, over all its messages (the new text, the system prompt, the history
    # an OpenAI or Anthropic client sends): over either, 413 before any stage sees it (docs/security.md).
    max_messages: int = Field(512, ge=1)
    max_input_chars: int = Field(256_000, ge=1)
    # The served models, their aliases and capabilities (switchyard/libs/models: SWITCHYARD_MODELS, SWITCHYARD_DEFAULT_MODEL,
    # SWITCHYARD_MODEL_FALLBACKS); `GET /v1/models` lists them, and every API resolves a request's model here.
    registry: ModelRegistry = Field(default_factory=ModelRegistry)
    # `POST /v1/admin/models`: how long a new model's pool may take to serve (load, convert the weights once)
    # before the request fails with its log and the entry is removed.
    model_start_timeout_s: float = Field(300.0, gt=0, le=3600)
    # `POST /v1/embeddings` inputs: how many, and characters in each and in all (over any, 413; the encoder
    # reads at most 256 tokens of each, and all the vectors come back in one bus message).
    embeddings_max_inputs: int = Field(128, ge=1, le=512)
    embeddings_max_input_chars: int = Field(8_000, ge=1)
    embeddings_max_total_chars: int = Field(64_000, ge=1)
    # `POST /detokenize`: token ids in one request.
    max_detokenize_tokens: int = Field(32_768, ge=1)
    default_max_tokens: int = 256
    # When the client gives none. The OpenAI and Anthropic APIs say 1.0; greedy suits a small model and makes
    # answers repeatable (a seed is assigned either way, so every request replays exactly).
    default_temperature: float = 0.0
    readyz_timeout_s: float = 1.5
    # After a Stop or a disconnect, how long to wait for the pipeline's final event before closing the record.
    cancel_wait_s: float = 5.0
    # A run quiet this long has its holder (the stage process that has it now) asked whether it lives;
    # no listener ends the run with `unavailable` at once, instead of at the deadline.
    liveness_idle_s: float = 1.0
    liveness_period_s: float = 0.25
    liveness_probe_s: float = 0.5
    # The bus connection lost for this long (not a blip while a cluster client moves to another node):
    # every stream in flight ends with `unavailable`, and what each client was shown is saved once it is back.
    bus_lost_after_s: float = Field(1.0, gt=0)
    # Saving what a client was shown when the stage that would have saved it died (or the bus went away) is
    # asked again while nobody answers, for at most this long.
    save_timeout_s: float = Field(60.0, gt=0)
    # How long a disconnected stream keeps running for a client that reconnects with Last-Event-ID before
    # it is cancelled. 0 cancels at once: nothing keeps decoding for a client that left.
    resume_grace_s: float = 0.0
    # How long a finished stream's events stay available to `GET /v1/streams/{rid}` on the relaying replica.
    resume_ttl_s: float = 60.0
    # Any replica can resume any stream: JetStream keeps `chat.events.>` in memory this long.
    resume_stream: bool = True
    resume_stream_max_age_s: float = 300.0
    resume_stream_max_bytes: int = 256 * 1024 * 1024
    keepalive_s: float = 15.0
    # Responses WebSocket mode: how long one connection lives (Open Responses says 60 minutes; then the
    # client gets `websocket_connection_limit_reached` and opens another). A message is bounded by
    # max_body_bytes, as an HTTP body is.
    responses_socket_max_s: float = Field(3600.0, gt=0)

    # Browsers on other origins (CORS): the origins allowed to call the API, exactly as a browser sends them
    # (`https://app.example.com`), or `*`. None by default: no CORS headers, so a page on another origin
    # cannot read any answer. SWITCHYARD_GATEWAY_CORS_ORIGINS='["https://app.example.com"]'.
    cors_origins: list[str] = Field(default_factory=list)
    # How long a browser may cache a preflight answer.
    cors_max_age_s: int = Field(600, ge=0, le=86_400)

    # Limits. Counters live in a JetStream key-value bucket so every replica enforces one limit.
    rate_limits: bool = True
    limits_bucket: str = "switchyard_limits"
    tiers: dict[str, TierLimits] = Field(default_factory=_default_tiers)
    # Admission: streams one gateway process relays at once; beyond it, 503 before any work queues up.
    max_active_streams: int = 256
    # SWITCHYARD_GRAMMAR_*: bounds on response_format, structured_outputs and tools' parameter schemas, checked
    # before a request is admitted (the inference service checks the same ones again before compiling).
    grammar: GrammarLimits = Field(default_factory=GrammarLimits)

    # PDF uploads are read in a child process under these limits (switchyard/services/gateway/pdf.py); over any, 413.
    pdf_max_pages: int = Field(300, ge=1)
    # Page content after decompression, the whole document: a few KB of FlateDecode can inflate to megabytes
    # of text operators that cost a CPU-second per megabyte to read.
    pdf_max_content_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Wall-clock for one parse, process start included; the child also gets this many CPU seconds.
    pdf_parse_timeout_s: float = Field(5.0, gt=0)
    pdf_max_memory_bytes: int = Field(1024 * 1024 * 1024, ge=64 * 1024 * 1024)
    # Parses at once per gateway process; more uploads wait their turn.
    pdf_max_parallel: int = Field(2, ge=1)

    # A verified key is trusted this long without a database read. A key revoked, rotated or changed over
    # the admin API (or the CLI, when it reaches the bus) is dropped from every gateway's cache at once
    # (`keys.changed`); otherwise within this. 0: every request reads the store.
    key_cache_s: float = Field(5.0, ge=0.0)
    # Token budgets per key (day, month): the JetStream key-value bucket every gateway debits.
    key_budgets_bucket: str = "switchyard_key_budgets"
    # The most a budgeted key's chat request reserves before it runs (prompt and max_tokens together; its
    # history is trimmed to fit). 0: the model's whole window. A key runs about budget-left / this many
    # requests at once, so a smaller one lets a small budget run more at once, with less history each.
    key_budget_reserve_tokens: int = Field(0, ge=0)

    @property
    def models(self) -> list[str]:
        return self.registry.names()

    def db_url(self) -> str:
        return database_url(self.database_url, self.data_dir, "gateway")
