"""A tokenizer read from a Hugging Face directory goes to xgrammar as its kind says: a byte-level BPE
(Qwen 2's) as BYTE_LEVEL, a SentencePiece-derived one (Gemma 3's) as BYTE_FALLBACK. The tokens our
tokenizer makes for a valid JSON answer are all accepted, the answer ends at EOS, and an invalid one is
refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.libs.tokenizer import load_tokenizer
from tests.tokenizer.hf_dirs import WRITERS

xgr = pytest.importorskip("xgrammar")


@pytest.mark.parametrize("name", ["qwen2", "gemma3"])
def test_a_directory_vocabulary_constrains_as_its_kind_says(name: str, tmp_path: Path) -> None:
    from switchyard.libs.engine.grammar import tokenizer_info

    try:
        WRITERS[name](tmp_path / name)
    except FileNotFoundError as e:  # Gemma's GGUF comes from an optional package
        pytest.skip(str(e))
    tok = load_tokenizer(str(tmp_path / name))
    assert tok.vocab_type == ("spm" if name == "gemma3" else "bpe")
    compiled = xgr.GrammarCompiler(tokenizer_info(tok, tok.vocab_size)).compile_builtin_json_grammar()
    matcher = xgr.GrammarMatcher(compiled)
    answer = '{"city": "Zürich", "note": "naïve ✓ 日本", "days": [1, 2]}'
    assert all(matcher.accept_token(i) for i in tok.encode(answer, add_bos=False))
    assert tok.eos_token_id is not None and matcher.accept_token(tok.eos_token_id) and matcher.is_terminated()
    bad = xgr.GrammarMatcher(compiled)
    assert not all(bad.accept_token(i) for i in tok.encode('{"city": Zürich}', add_bos=False))
