from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from switchyard.libs.bus import ServiceSettings
from switchyard.libs.models import ModelRegistry
from switchyard.libs.store.db import database_url
from switchyard.libs.tokenizer import TokenizerSettings


class ContextSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_CONTEXT_")

    # None: a SQLite file `<data_dir>/context.db`.
    database_url: str | None = None
    # The model (a GGUF file or a Hugging Face directory) whose chat template and tokenizer render prompts;
    # None: SWITCHYARD_MODEL_PATH or the bundled model.
    model_path: str | None = None
    # SWITCHYARD_MODEL_PATH and SWITCHYARD_TOKENIZER_CACHE, shared with the engine: read with these settings.
    tokenizer: TokenizerSettings = Field(default_factory=TokenizerSettings)
    # The served models (SWITCHYARD_MODELS): a request for another model than the default is rendered and
    # counted with that model's own files (its template and vocabulary).
    registry: ModelRegistry = Field(default_factory=ModelRegistry)
    # Prompt tokens plus sampling.max_tokens must fit here; history is trimmed to make them.
    context_budget: int = 2048
    # Token ids one `/tokenize` reply carries (a count alone is not bounded by it): more would not fit one
    # bus message.
    tokenize_max_ids: int = 100_000
    # Largest uploaded file kept, and how much of one attached file goes into a prompt.
    max_file_chars: int = 200_000
    prompt_file_chars: int = 8_000
    # Saved facts rendered into a prompt: the oldest ones past this many are left out.
    prompt_memory_items: int = 50
    # Publish each request on `early.work` as it arrives, so safety_in and tools start their model passes
    # on the user's text while context and the router work (off: each starts when the request reaches it).
    early_passes: bool = True

    def db_url(self) -> str:
        return database_url(self.database_url, self.data_dir, "context")
