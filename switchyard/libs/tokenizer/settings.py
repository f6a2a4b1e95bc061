"""Which model file to read and where to keep its parsed tokenizer, from the environment.

Built once by an entry point (a service's settings hold one) and passed down as plain values:
nothing else in switchyard/libs/tokenizer reads the environment."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class TokenizerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", extra="ignore")

    # SWITCHYARD_MODEL_PATH: the model every stage serves and tokenizes with (a GGUF file or a Hugging Face
    # checkpoint directory); None: the bundled model (paths.default_model_path), the one place the default
    # is named.
    model_path: str | None = None
    # SWITCHYARD_TOKENIZER_CACHE: parsed tokenizer metadata; None: var/cache/tokenizer; "": no cache.
    tokenizer_cache: str | None = None

    def resolved_model_path(self, preferred: str | None = None) -> str:
        """`preferred` (a service's own setting) if given, else this environment's, else the bundled model."""
        from switchyard.libs.tokenizer.paths import default_model_path

        return preferred or self.model_path or default_model_path()
