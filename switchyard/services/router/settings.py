from __future__ import annotations

from pydantic import BaseModel, Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.models import ModelRegistry
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME


class PoolSpec(BaseModel):
    name: str
    context_length: int


class ModelSpec(BaseModel):
    """Kept so existing SWITCHYARD_ROUTER_MODELS settings still load: modes and budgets are the request
    plan's now (switchyard/libs/plan.py, from the model card), and pools come from replicas' heartbeats."""

    name: str
    engine: str = "native"
    pools: list[PoolSpec] = Field(default_factory=lambda: [PoolSpec(name="default", context_length=8192)])


class RouterSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_ROUTER_")

    models: list[ModelSpec] = Field(default_factory=lambda: [ModelSpec(name=DEFAULT_MODEL_NAME)])
    default_model: str = DEFAULT_MODEL_NAME
    # The served models: names, aliases, capabilities and fallbacks (switchyard/libs/models; SWITCHYARD_MODELS, ...).
    registry: ModelRegistry = Field(default_factory=ModelRegistry)
    # A replica whose last heartbeat is older than this is considered gone.
    replica_ttl_s: float = 6.0
    # How long a request waits for a first replica to appear (service start-up) before failing.
    wait_for_replica_s: float = 5.0
