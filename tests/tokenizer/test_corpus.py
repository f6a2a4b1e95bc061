"""Our tokenizers against llama.cpp's, token for token, on the whole corpus (tests/tokenizer/corpus.json).

The references under tests/tokenizer/refs/ were written by llama.cpp (tests/tokenizer/make_refs.py);
where llama_cpp is importable the same comparison also runs live, so a newer llama.cpp that
tokenizes differently shows up here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchyard.libs.tokenizer import IncrementalDecoder, Tokenizer
from switchyard.libs.tokenizer.backends import SPACE
from tests.tokenizer.make_refs import corpus_digest, llama_detokenize
from tests.tokenizer.models import CASES, case_meta, load_corpus, refs_path, write_variant

# The two vocabularies of real model files; the others are one-setting variants of these.
REAL = ["smollm2", "gemma3"]
_LLAMA_CPP_CLEANS_SPACES = {"smollm2-llama-bpe", "smollm2-gpt2"}


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return load_corpus()


_TOKENIZERS: dict[str, Tokenizer] = {}


def tokenizer(key: str) -> Tokenizer:
    if key not in _TOKENIZERS:
        try:
            _TOKENIZERS[key] = Tokenizer(case_meta(key))
        except FileNotFoundError as e:
            pytest.skip(str(e))
    return _TOKENIZERS[key]


def test_corpus_is_large_and_varied(corpus):
    assert len(corpus) >= 500
    joined = "".join(corpus)
    for sample in ("Привет", "Γειά", "你好", "日本語", "한국어", "مرحبا", "नमस्ते", "สวัสดี", "🎉", "def ", "\t\t"):
        assert sample in joined
    assert any("<|im_start|>" in t for t in corpus) and any("<start_of_turn>" in t for t in corpus)


@pytest.mark.parametrize("key", list(CASES))
def test_ids_equal_llama_cpp_references(key, corpus):
    doc = json.loads(refs_path(key).read_text(encoding="utf-8"))
    assert doc["corpus_sha256"] == corpus_digest(corpus), "corpus changed: rerun tests/tokenizer/make_refs.py"
    tok = tokenizer(key)
    mismatched = [t for t, ref in zip(corpus, doc["ids"], strict=True) if tok.encode(t, add_bos=False) != ref]
    assert mismatched == [], f"{len(mismatched)} of {len(corpus)} texts differ, first: {mismatched[0]!r}"


@pytest.mark.parametrize("key", list(CASES))
def test_ids_equal_llama_cpp_live(key, corpus, tmp_path: Path):
    llama_cpp = pytest.importorskip("llama_cpp")
    tok = tokenizer(key)
    llm = llama_cpp.Llama(write_variant(key, tmp_path), vocab_only=True, verbose=False)
    for text in corpus:
        ref = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        assert tok.encode(text, add_bos=False) == ref, text
        # Decoding (special tokens rendered) agrees with llama.cpp's too, except where llama.cpp
        # "cleans up" spaces before punctuation (its clean_spaces, on for gpt-2 and llama-bpe):
        # we decode losslessly, so a streamed answer is exactly the text the tokens spell.
        if key not in _LLAMA_CPP_CLEANS_SPACES:
            assert tok.decode(ref) == llama_detokenize(llm, ref), text
        # With BOS as the file says.
        assert tok.encode(text) == llm.tokenize(text.encode("utf-8"), add_bos=True, special=True), text


@pytest.mark.parametrize("key", REAL)
def test_bos_as_the_file_says(key):
    tok = tokenizer(key)
    ids = tok.encode("Hello")
    if key == "gemma3":
        assert tok.add_bos and ids[0] == tok.bos_token_id == tok.token_to_id("<bos>")
    else:
        assert not tok.add_bos and ids[0] != tok.bos_token_id
    assert tok.encode("Hello", add_bos=False) == ids[1:] if tok.add_bos else ids


@pytest.mark.parametrize("key", [*REAL, "smollm2-llama-bpe", "smollm2-qwen2", "smollm2-gpt2"])
def test_decode_round_trip(key, corpus):
    tok = tokenizer(key)
    for text in corpus:
        # SentencePiece writes spaces as U+2581, so a literal U+2581 comes back as a space (llama.cpp too).
        want = text.replace(SPACE, " ") if tok.vocab_type == "spm" else text
        assert tok.decode(tok.encode(text, add_bos=False)) == want, text


@pytest.mark.parametrize("key", REAL)
def test_incremental_decoder_on_corpus(key, corpus):
    tok = tokenizer(key)
    for text in corpus:
        ids = tok.encode(text, add_bos=False)
        dec = IncrementalDecoder(tok)
        deltas = [dec.push([i]) for i in ids] + [dec.flush()]
        assert "".join(deltas) == tok.decode(ids), text
        # No delta ever carries half a character.
        assert all("\ufffd" not in d for d in deltas) or "\ufffd" in text, text


def test_gemma_specifics():
    tok = tokenizer("gemma3")
    assert tok.vocab_type == "spm" and tok.vocab_size == 262144
    turn = tok.encode("<start_of_turn>user\nhi<end_of_turn>", add_bos=False)
    assert turn[0] == tok.token_to_id("<start_of_turn>") and turn[-1] == tok.token_to_id("<end_of_turn>")
    # Runs of spaces and newlines are whole user-defined tokens, matched before SentencePiece runs.
    assert tok.encode("    ", add_bos=False) == [tok.token_to_id("    ")]
    assert tok.encode("\n\n", add_bos=False) == [tok.token_to_id("\n\n")]
    # A character outside the vocabulary is spelled as its UTF-8 bytes.
    assert "\U000f0000" not in case_meta("gemma3").tokens
    assert [tok.id_to_token(i) for i in tok.encode("\U000f0000", add_bos=False)] == [
        "<0xF3>",
        "<0xB0>",
        "<0x80>",
        "<0x80>",
    ]
    assert tok.decode(tok.encode("a\U000f0000b", add_bos=False)) == "a\U000f0000b"


@pytest.mark.parametrize("key", REAL)
def test_the_cached_pipeline_tokenizes_as_the_built_one(key, corpus, tmp_path: Path):
    """load_tokenizer keeps the built pipeline on disk; the copy read back is the same tokenizer."""
    from switchyard.libs.tokenizer.backends import load_backend

    meta = case_meta(key)
    cache = str(tmp_path / "pipeline.json")
    written = load_backend(meta, cache)  # builds and writes
    read = Tokenizer(meta, load_backend(meta, cache))  # reads back
    assert Path(cache).exists()
    built = tokenizer(key)
    for text in corpus:
        ids = built.encode(text)
        assert read.encode(text) == ids == Tokenizer(meta, written).encode(text), text
        assert read.decode(ids) == built.decode(ids)
