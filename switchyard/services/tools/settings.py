from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.tools import ToolSettings


class ToolsSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(
        env_prefix="SWITCHYARD_TOOLS_", env_nested_delimiter="__"
    )

    tools: ToolSettings = Field(default_factory=ToolSettings)
    use_embeddings: bool = True
    # The model (a GGUF file or a Hugging Face directory) whose chat template renders the prompt; None => the default.
    model_path: str | None = None
    # The planner's embedding runs on one thread this many nice steps below the engine.
    planner_nice: int = 10
