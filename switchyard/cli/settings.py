"""What the `switchyard` command reads from the environment, read once in `switchyard.cli.__main__.main`."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from switchyard.libs.models import ModelRegistry


class CliSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", extra="ignore")

    # Where `run` keeps the stack's state (logs, keys, stack.json), and where `status` and `replay` find it.
    data_dir: Path = Path("var")
    # The gateway's port for `run`, and for `replay` when no URL is given.
    port: int = 8000
    # A NATS server for `run` to use; None starts one of its own.
    nats_url: str | None = Field(None, validation_alias=AliasChoices("NATS_URL", "nats_url"))
    # How often the nats-server `run` starts fsyncs its file streams (the durable log, key budgets and
    # limits, the registry): `always` (each write, before it is acknowledged) or a duration (`1s`); empty:
    # nats-server's own default of two minutes (docs/security.md, "Faults").
    nats_sync_interval: str = Field("always", pattern=r"^(always|\d+(ms|s|m|h)|)$")
    # The gateway `replay` talks to; None: http://127.0.0.1:<port>.
    url: str | None = None
    # The keys `run` hands the stack, and `replay` authenticates with; empty: the saved (or a new) one.
    api_key: str = ""
    admin_key: str = ""

    # The served models (switchyard/libs/models): `run` starts one inference pool per model.
    registry: ModelRegistry = Field(default_factory=ModelRegistry)
    # The python a pool whose engine is vLLM runs with: vLLM's own virtualenv (`make setup-vllm`).
    vllm_python: Path = Path.home() / ".cache" / "switchyard" / "vllm-venv" / "bin" / "python"

    def interpreters(self) -> dict[str, str]:
        """The stack's interpreters by `inference:<engine>`, for the engines whose environment is here."""
        return {"inference:vllm": str(self.vllm_python)} if self.vllm_python.exists() else {}

    def extra_pools(self) -> dict[str, str]:
        """Model -> pool of every model but the default one, which the stack's own `inference` serves."""
        return {c.name: c.pool for c in self.registry.models if c.name != self.registry.get(None).name}

    def gateway_url(self) -> str:
        return self.url.rstrip("/") if self.url else f"http://127.0.0.1:{self.port}"
