"""The model registry: names and aliases resolve, settings configure it, bad configurations are refused,
and a model file that ships in chunk packages is assembled on first use."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from switchyard.cli.settings import CliSettings
from switchyard.libs.models import GEMMA_MODEL_NAME, ModelCard, ModelRegistry, ensure_model_path
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from switchyard.services.inference.settings import InferenceSettings


def test_names_and_aliases_resolve_and_capabilities_follow_the_chat_template() -> None:
    r = ModelRegistry()
    assert r.get(None).name == DEFAULT_MODEL_NAME
    assert r.get("smollm2-135m-instruct").name == r.get("SMOLLM2").name == DEFAULT_MODEL_NAME
    gemma = r.get("gemma3-270m")
    assert gemma.name == GEMMA_MODEL_NAME and gemma.pool == "gemma" and not gemma.chat_template
    assert gemma.can("completion") and not gemma.can("chat") and not gemma.can("tools")
    assert r.find("gpt-4o") is None
    # A card that lists chat but has no template still cannot chat.
    assert not ModelCard(name="m", pool="p", capabilities=["chat"], chat_template=False).can("chat")


def test_the_environment_configures_models_and_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_MODEL_FALLBACKS", json.dumps({GEMMA_MODEL_NAME: DEFAULT_MODEL_NAME}))
    assert ModelRegistry().get(GEMMA_MODEL_NAME).fallback == DEFAULT_MODEL_NAME
    monkeypatch.setenv("SWITCHYARD_MODELS", json.dumps([{"name": "only", "pool": "p1"}]))
    monkeypatch.setenv("SWITCHYARD_DEFAULT_MODEL", "only")
    monkeypatch.delenv("SWITCHYARD_MODEL_FALLBACKS")
    assert ModelRegistry().names() == ["only"]


@pytest.mark.parametrize(
    "config",
    [
        {"models": [{"name": "a", "pool": "p"}, {"name": "b", "pool": "q", "aliases": ["a"]}], "default_model": "a"},
        {"models": [{"name": "a", "pool": "p", "fallback": "nope"}], "default_model": "a"},
        {"models": [{"name": "a", "pool": "p", "aliases": ["x"], "fallback": "x"}], "default_model": "a"},
        {"models": [{"name": "a", "pool": "p"}], "default_model": "b"},
        {"model_fallbacks": {"nope": DEFAULT_MODEL_NAME}},
        {"models": [{"name": "a", "pool": "no.dots"}], "default_model": "a"},
    ],
)
def test_inconsistent_registries_are_refused(config: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ModelRegistry(**config)  # type: ignore[arg-type]


def test_run_starts_a_pool_per_model_beside_the_default_one() -> None:
    assert CliSettings().extra_pools() == {GEMMA_MODEL_NAME: "gemma"}


def test_an_inference_process_takes_its_model_from_the_registry() -> None:
    gemma = ModelRegistry().get(GEMMA_MODEL_NAME)
    settings = InferenceSettings(model=GEMMA_MODEL_NAME)
    settings.serve_card()
    assert (settings.engine, settings.pool, settings.model_name) == (gemma.engine, "gemma", GEMMA_MODEL_NAME)
    # The one-line switch: the same entry with engine="native" serves the Gemma file itself.
    native = gemma.model_copy(update={"engine": "native"})
    s2 = InferenceSettings(model=GEMMA_MODEL_NAME, registry=ModelRegistry(models=[native], default_model=native.name))
    s2.serve_card()
    assert s2.engine == "native" and s2.model_path == gemma.path
    assert InferenceSettings().card() is None  # no model named: today's settings as they are


def test_a_chunked_model_file_is_assembled_whole_on_first_use(tmp_path: Path) -> None:
    gemma = ModelRegistry().get(GEMMA_MODEL_NAME)
    card = gemma.model_copy(update={"path": str(tmp_path / "sub" / "gemma.gguf")})
    path = ensure_model_path(card)
    assert path == card.path and not list((tmp_path / "sub").glob("*.partial"))
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest().startswith("a5fd3b62")
    assert ensure_model_path(card) == path  # already there: not written again
    with pytest.raises(FileNotFoundError):
        ensure_model_path(card.model_copy(update={"path": str(tmp_path / "x.gguf"), "assemble_package": None}))
