"""A registry entry added at run time: each reason it is refused (the 400's message), and the entries that pass."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from pydantic import ValidationError

from switchyard.libs.engine.weights import ARCHITECTURES
from switchyard.libs.models import ModelRegistry
from switchyard.libs.models.admit import check_card, check_files, check_names
from switchyard.libs.tokenizer.paths import default_model_path
from switchyard.schemas import ModelCard


def card(**kw: Any) -> ModelCard:
    return ModelCard.model_validate({"name": "added", "pool": "added", "path": default_model_path(), **kw})


def gguf_file(path: Path, arch: str) -> str:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def refused(c: ModelCard, registry: ModelRegistry | None = None) -> str:
    with pytest.raises(ValueError) as e:
        check_card(c, registry or ModelRegistry())
    return str(e.value)


def test_a_copy_of_the_bundled_gguf_and_a_checkpoint_directory_pass(tmp_path: Path) -> None:
    check_card(card(), ModelRegistry())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    check_card(card(path=str(tmp_path), engine="vllm"), ModelRegistry())


def test_a_missing_path_is_refused() -> None:
    assert "path is required" in refused(card(path=None))


def test_a_path_that_does_not_exist_or_is_relative_is_refused(tmp_path: Path) -> None:
    assert "does not exist" in refused(card(path=str(tmp_path / "nope.gguf")))
    assert "must be absolute" in refused(card(path="model.gguf"))


def test_a_file_that_is_not_gguf_and_a_directory_without_config_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    assert "is not a GGUF file" in refused(card(path=str(text)))
    assert "has no config.json" in refused(card(path=str(tmp_path)))
    (tmp_path / "config.json").write_text("{not json")
    assert "is not readable JSON" in refused(card(path=str(tmp_path)))


def test_a_gguf_whose_architecture_the_native_engine_does_not_serve_is_refused(tmp_path: Path) -> None:
    bert = gguf_file(tmp_path / "bert.gguf", "bert")
    message = refused(card(path=bert))
    # The served list is the engine's own, whatever it holds now.
    assert "'bert' is not served by the native engine" in message and all(a in message for a in ARCHITECTURES)
    check_files(card(path=bert), served=("bert",))
    check_files(card(path=bert, engine="vllm"))  # vLLM reads what it reads: not the native engine's list
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(16))
    assert "not a readable GGUF file" in refused(card(path=str(broken)))


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"name": "SmolLM2-135M-Instruct"}, "is already served"),
        ({"name": "SMOLLM2"}, "is already served"),  # an alias, in another case
        ({"aliases": ["gemma3-270m"]}, "is already served"),
        ({"name": "all-MiniLM-L6-v2"}, "is already served"),  # the embedding model
        ({"aliases": ["added"]}, "names one name twice"),
        ({"pool": "default"}, "already serves a model"),
        ({"name": "a:reasoning"}, "is not allowed"),
        ({"name": "org/model"}, "is not allowed"),
        ({"aliases": ["two words"]}, "is not allowed"),
        ({"engine": "llama.cpp"}, "is not one of"),
        ({"assemble_package": "os"}, "assemble_package is not accepted"),
        ({"fallback": "nope"}, "is not a served model"),
    ],
)
def test_names_pools_engines_and_fallbacks_that_do_not_fit_the_registry_are_refused(
    entry: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        check_names(card(**entry), ModelRegistry())


@pytest.mark.parametrize(
    "entry",
    [
        {"pool": "a.b"},  # a pool is a subject token
        {"pool": ">"},
        {"pool": ""},
        {"name": "x" * 129},
        {"aliases": ["y" * 129]},
        {"aliases": [f"a{i}" for i in range(17)]},
        {"path": "/" + "p" * 4096},
        {"engine": "e" * 33},
        {"owner": "o" * 129},
        {"context_length": 0},
    ],
)
def test_the_card_itself_bounds_every_string(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        card(**entry)
