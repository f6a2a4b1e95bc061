"""A tokenizer read from a Hugging Face model directory (switchyard/libs/tokenizer/hf_dir.py) against
transformers' AutoTokenizer on the same files: ids on the whole corpus, decoding, special tokens, EOS,
and chat templates rendered by our sandboxed renderer. The three directories (byte-level BPE, a
Qwen 2 tokenizer, Gemma 3's SentencePiece-derived one) are written by tests/tokenizer/hf_dirs.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from switchyard.libs.tokenizer import IncrementalDecoder, TemplateError, Tokenizer, load_tokenizer
from tests.tokenizer.hf_dirs import GEMMA_TEMPLATE, QWEN_TEMPLATE
from tests.tokenizer.models import load_corpus

transformers = pytest.importorskip("transformers")

NAMES = ["smollm2", "qwen2", "gemma3"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Météo à Zürich <now>",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi ✓"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "  Bye, 日本語 🎉  "},
    ],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
]
# Qwen's template lays out tools, tool calls and tool results itself.
TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Zürich?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "Zürich"}}}],
    },
    {"role": "tool", "content": '{"temp": 21}'},
    {"role": "tool", "content": '{"wind": "none"}'},
]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return load_corpus()


_PAIRS: dict[str, tuple[Tokenizer, Any]] = {}


@pytest.fixture
def pair(request: pytest.FixtureRequest, hf_tokenizer_dir: Callable[[str], Path]) -> tuple[Tokenizer, Any]:
    """(ours, transformers') for the directory named by the test's `name` parameter."""
    name = request.node.callspec.params["name"]
    if name not in _PAIRS:
        path = str(hf_tokenizer_dir(name))
        _PAIRS[name] = (load_tokenizer(path), transformers.AutoTokenizer.from_pretrained(path, local_files_only=True))
    return _PAIRS[name]


@pytest.mark.parametrize("name", NAMES)
def test_ids_equal_transformers_on_the_corpus(name, pair, corpus):
    ours, theirs = pair
    # BOS as the files say (transformers' add_special_tokens=True), and none asked for.
    with_bos = [t for t in corpus if ours.encode(t) != theirs.encode(t)]
    assert with_bos == [], f"{len(with_bos)} of {len(corpus)} texts differ, first: {with_bos[0]!r}"
    bare = [t for t in corpus if ours.encode(t, add_bos=False) != theirs.encode(t, add_special_tokens=False)]
    assert bare == [], f"{len(bare)} of {len(corpus)} texts differ, first: {bare[0]!r}"


@pytest.mark.parametrize("name", NAMES)
def test_decoding_equals_transformers(name, pair, corpus):
    ours, theirs = pair
    for text in corpus:
        ids = ours.encode(text)
        assert ours.decode(ids) == theirs.decode(ids, clean_up_tokenization_spaces=False), text
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        ), text


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_and_special_tokens_as_the_files_say(name, pair):
    ours, theirs = pair
    assert ours.vocab_size == len(theirs)
    assert ours.vocab_type == ("spm" if name == "gemma3" else "bpe")
    assert ours.bos_token_id == theirs.bos_token_id and ours.eos_token_id == theirs.eos_token_id
    assert ours.add_bos == (name == "gemma3") == (theirs.encode("x")[0] == theirs.bos_token_id)
    assert set(theirs.all_special_ids) <= ours.special_ids
    for i in [*range(0, ours.vocab_size, 997), ours.vocab_size - 1]:
        token = ours.id_to_token(i)
        assert token == theirs.convert_ids_to_tokens(i)
        assert ours.token_to_id(token) == theirs.convert_tokens_to_ids(token) == i
    assert ours.has_chat_template and ours.template.from_file


def test_eos_and_context_length_per_directory(hf_tokenizer_dir):
    smol, qwen, gemma = (load_tokenizer(str(hf_tokenizer_dir(n))) for n in NAMES)
    # No generation config: the tokenizer's EOS (SmolLM2's <|im_end|>), which is also its template's end of turn.
    assert smol.eos_token_ids == {smol.token_to_id("<|im_end|>")}
    assert smol.context_length == 2048  # no config.json, and tokenizer_config's length is transformers' sentinel
    # generation_config.json's list, every id of it.
    assert qwen.eos_token_ids == {qwen.token_to_id("<|im_end|>"), qwen.token_to_id("<|endoftext|>")}
    assert gemma.eos_token_ids == {gemma.token_to_id("<eos>"), gemma.token_to_id("<end_of_turn>")}
    assert qwen.context_length == gemma.context_length == 32768
    assert qwen.model_name == "qwen2"
    # A non-special added token is text; a special one is not.
    assert qwen.token_to_id("<tool_call>") not in qwen.special_ids
    assert qwen.token_to_id("<|object_ref_start|>") in qwen.special_ids
    assert qwen.encode("a<tool_call>b")[1] == qwen.token_to_id("<tool_call>")


def test_template_sources(hf_tokenizer_dir):
    smol, qwen, gemma = (load_tokenizer(str(hf_tokenizer_dir(n))) for n in NAMES)
    assert smol.template.source == (hf_tokenizer_dir("smollm2") / "chat_template.jinja").read_text()
    assert qwen.template.source == QWEN_TEMPLATE and qwen.template.renders_tools  # tokenizer_config's string
    assert gemma.template.source == GEMMA_TEMPLATE  # the "default" of tokenizer_config's named list
    assert not smol.template.renders_tools and not gemma.template.renders_tools


def _theirs(theirs, messages, add_generation_prompt, tools=None, tokenize=False):
    return theirs.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=tokenize, return_dict=False
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_templates_render_as_transformers(name, pair, add_generation_prompt):
    ours, theirs = pair
    for messages in CONVERSATIONS:
        text = ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
        want = _theirs(theirs, messages, add_generation_prompt)
        # Where the tokenizer adds BOS itself, the template's leading one is dropped from the text (one BOS).
        assert text == (want.removeprefix(ours.bos_token) if ours.add_bos else want)
        assert ours.encode(text) == _theirs(theirs, messages, add_generation_prompt, tokenize=True)


@pytest.mark.parametrize("name", ["qwen2"])
def test_a_template_that_takes_tools_gets_them_as_transformers_does(name, pair):
    ours, theirs = pair
    for messages, prompt in ((CONVERSATIONS[1], True), (TOOL_CONVERSATION, True), (TOOL_CONVERSATION, False)):
        text = ours.apply_chat_template(messages, add_generation_prompt=prompt, tools=TOOLS)
        assert text == _theirs(theirs, messages, prompt, tools=TOOLS)
        assert '"description": "Météo à Zürich <now>"' in text
        assert ("<tool_response>" in text) == (messages is TOOL_CONVERSATION)
        assert ours.encode(text) == _theirs(theirs, messages, prompt, tools=TOOLS, tokenize=True)


@pytest.mark.parametrize("name", ["gemma3"])
def test_the_template_refuses_what_it_refuses(name, pair):
    ours, theirs = pair
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateError, match="alternate"):
        ours.apply_chat_template(bad)
    with pytest.raises(Exception, match="alternate"):
        _theirs(theirs, bad, True)


@pytest.mark.parametrize("name", ["qwen2", "gemma3"])
def test_incremental_decoding_on_the_corpus(name, pair, corpus):
    ours, _ = pair
    for text in corpus[::3]:
        ids = ours.encode(text, add_bos=False)
        dec = IncrementalDecoder(ours)
        deltas = [dec.push([i]) for i in ids] + [dec.flush()]
        assert "".join(deltas) == ours.decode(ids), text


def test_cached_per_path(hf_tokenizer_dir):
    path = str(hf_tokenizer_dir("smollm2"))
    assert load_tokenizer(path) is load_tokenizer(path)


def _copy(src: Path, dst: Path) -> Path:
    """A directory holding src's files, tokenizer.json linked (Gemma's is 33 MB)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name == "tokenizer.json":
            os.symlink(f, dst / f.name)
        else:
            shutil.copy(f, dst / f.name)
    return dst


def _edit(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    path.write_text(json.dumps(data))


def test_bos_is_added_as_the_post_processor_says_as_transformers_does(hf_tokenizer_dir, tmp_path):
    """transformers 5 reads only tokenizer.json's post-processor (tokenizer_config.json's add_bos_token is
    dropped where a tokenizer.json exists); we do the same, so the ids agree."""
    d = _copy(hf_tokenizer_dir("gemma3"), tmp_path / "gemma-config-says-no-bos")
    _edit(d / "tokenizer_config.json", add_bos_token=False)
    ours, theirs = load_tokenizer(str(d)), transformers.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    assert ours.add_bos and ours.encode("Hello") == theirs.encode("Hello") == [ours.bos_token_id, 9259]

    d = tmp_path / "gemma-no-post-processor"
    d.mkdir()
    for f in hf_tokenizer_dir("gemma3").iterdir():
        if f.name != "tokenizer.json":
            shutil.copy(f, d / f.name)
    pipeline = json.loads((hf_tokenizer_dir("gemma3") / "tokenizer.json").read_text())
    (d / "tokenizer.json").write_text(json.dumps({**pipeline, "post_processor": None}))
    ours, theirs = load_tokenizer(str(d)), transformers.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    assert not ours.add_bos and ours.encode("Hello") == theirs.encode("Hello") == [9259]
    # The template's <bos> is then kept as text: the prompt still starts with exactly one.
    msgs = CONVERSATIONS[0]
    assert ours.apply_chat_template(msgs) == _theirs(theirs, msgs, True)
    assert ours.encode(ours.apply_chat_template(msgs)).count(ours.bos_token_id) == 1


def test_eos_from_config_json_without_a_generation_config_and_no_truncation(hf_tokenizer_dir, tmp_path):
    d = tmp_path / "smol"
    shutil.copytree(hf_tokenizer_dir("smollm2"), d)
    _edit(d / "config.json", model_type="llama", eos_token_id=[2, 0], max_position_embeddings=4096)
    # A file that would truncate every encoding to 4 tokens: prompts are never cut.
    _edit(
        d / "tokenizer.json",
        truncation={"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0},
    )
    tok = load_tokenizer(str(d))
    assert tok.eos_token_ids == {0, 2} and tok.context_length == 4096
    assert len(tok.encode("one two three four five six seven")) == 7


def test_a_base_model_directory_gets_the_fallback_for_its_architecture(hf_tokenizer_dir, tmp_path):
    d = _copy(hf_tokenizer_dir("gemma3"), tmp_path / "gemma-base")
    _edit(d / "tokenizer_config.json", chat_template=None)
    tok = load_tokenizer(str(d))
    assert tok.template.name == "gemma" and not tok.has_chat_template  # config.json's model_type: gemma3_text
    assert tok.apply_chat_template(CONVERSATIONS[0]) == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({}, "tokenizer.json"),
        ({"tokenizer.json": "{not json"}, "tokenizer.json"),
        ({"tokenizer.json": "[1, 2]"}, "tokenizer.json"),
        ({"tokenizer.json": '{"model": {"type": "Nope"}}'}, "tokenizer.json"),
        ({"tokenizer_config.json": "{"}, "tokenizer_config.json"),
        ({"generation_config.json": "\xff"}, "generation_config.json"),
        ({"config.json": ""}, "config.json"),
    ],
)
def test_a_bad_directory_is_a_clear_error_naming_the_file(files, named, hf_tokenizer_dir, tmp_path):
    d = tmp_path / "bad"
    if "tokenizer.json" in files or not files:
        d.mkdir()
    else:
        shutil.copytree(hf_tokenizer_dir("smollm2"), d)
    for name, text in files.items():
        (d / name).write_text(text, encoding="latin-1")
    with pytest.raises(ValueError, match=str(d / named).replace(".", r"\.")):
        load_tokenizer(str(d))


def test_a_directory_tokenizer_loads_without_torch(hf_tokenizer_dir):
    path = str(hf_tokenizer_dir("qwen2"))
    code = f"import sys, switchyard.libs.tokenizer as t; t.load_tokenizer({path!r}); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())
