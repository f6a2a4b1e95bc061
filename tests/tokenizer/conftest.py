"""The Hugging Face tokenizer directories (tests/tokenizer/hf_dirs.py), each written once per session on
first use under the session's temporary directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tokenizer.hf_dirs import WRITERS


@pytest.fixture(scope="session")
def hf_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("hf-tokenizers")
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            out = root / name
            try:
                WRITERS[name](out)
            except FileNotFoundError as e:  # Gemma's GGUF comes from an optional package
                pytest.skip(str(e))
            built[name] = out
        return built[name]

    return get
