from __future__ import annotations

import pytest

from libs.tokenizer import Tokenizer, load_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The real tokenizer and chat template of the bundled model (SmolLM2, ChatML)."""
    return load_tokenizer()
