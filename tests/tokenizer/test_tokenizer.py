import os
import subprocess
import sys

import pytest

from switchyard.libs.tokenizer import IncrementalDecoder, default_model_path, load_tokenizer

SAMPLES = [
    "Hello world",
    "héllo wörld — ünïcödé ✓ 日本語のテキスト 🎉🚀",
    "def f(x):\n    return x**2  # sq\n\n\ttab",
    "I'm 42 years old, it's 3.14159 and 2024-01-01",
    "  leading  spaces   and trailing ",
    "<|im_start|>user\nhi<|im_end|>\n",
]

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def hf_tok():
    transformers = pytest.importorskip("transformers")
    path = default_model_path()
    try:
        return transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    except Exception as exc:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers cannot load the GGUF tokenizer: {exc}")


def test_metadata(tok):
    assert tok.context_length == 8192
    assert "Smollm2" in tok.model_name
    assert tok.eos_token_ids == {tok.token_to_id("<|im_end|>")}
    assert tok is load_tokenizer(default_model_path())  # cached per path


@pytest.mark.parametrize("text", SAMPLES)
def test_matches_transformers(tok, hf_tok, text):
    assert tok.encode(text) == hf_tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", SAMPLES)
def test_roundtrip(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.count(text) == len(tok.encode(text))


def test_special_tokens_stay_whole(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == tok.token_to_id("<|im_start|>")
    assert ids[-1] == tok.token_to_id("<|im_end|>")


def test_chat_template(tok):
    assert tok.apply_chat_template(CONVERSATION) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(CONVERSATION, add_generation_prompt=False)
    assert no_prompt.endswith("Bye<|im_end|>\n")
    # Without a system message the template injects its default one.
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]).startswith("<|im_start|>system\nYou are")


def test_chat_template_matches_transformers(tok, hf_tok):
    expected = hf_tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(CONVERSATION) == expected


def test_incremental_decoder_never_emits_broken_utf8(tok):
    text = "ok 🎉 日本語 é🚀!"
    ids = tok.encode(text)
    dec = IncrementalDecoder(tok)
    deltas = [dec.push([i]) for i in ids]
    deltas.append(dec.flush())
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == text
    # Emoji span several byte tokens, so some pushes must have been held back.
    assert "" in deltas[:-1]


def test_no_torch_import():
    code = "import sys, switchyard.libs.tokenizer as t; t.load_tokenizer(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())


def test_metadata_cache_roundtrip(tmp_path):
    from switchyard.libs.tokenizer.gguf_meta import load_tokenizer_meta, read_tokenizer_meta

    path = default_model_path()
    fresh = read_tokenizer_meta(path)
    first = load_tokenizer_meta(path, str(tmp_path))  # writes the cache
    assert list(tmp_path.iterdir())
    again = load_tokenizer_meta(path, str(tmp_path))  # reads it back
    assert fresh == first == again
