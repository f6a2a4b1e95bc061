"""Read the tokenizer-relevant metadata of a GGUF file without touching its tensors."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from gguf import GGUFReader

log = logging.getLogger(__name__)
_CACHE_VERSION = 3


@dataclass
class TokenizerMeta:
    model: str
    pre: str | None
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_token_id: int | None
    eos_token_id: int | None
    pad_token_id: int | None
    add_bos: bool
    chat_template: str | None
    model_name: str
    context_length: int
    # SentencePiece vocabularies rank merges by these; empty for byte-level BPE (it has merges).
    scores: list[float] = field(default_factory=list)
    unk_token_id: int | None = None
    add_space_prefix: bool = False
    architecture: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def read_tokenizer_meta(path: str) -> TokenizerMeta:
    reader = GGUFReader(path, "r")
    arch = _field(reader, "general.architecture", "llama")
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    extra = {}
    eot = _field(reader, "tokenizer.ggml.eot_token_id")
    if eot is not None:
        extra["eot_token_id"] = int(eot)
    model = _field(reader, "tokenizer.ggml.model", "gpt2")
    pre = _field(reader, "tokenizer.ggml.pre")
    # llama.cpp's defaults where the file is silent: SentencePiece adds BOS and a leading space,
    # Llama 3's BPE adds BOS, other BPE vocabularies add neither.
    spm = model == "llama"
    bos_default = spm or pre in ("llama3", "llama-v3", "llama-bpe", "falcon3")
    return TokenizerMeta(
        model=model,
        pre=pre,
        tokens=list(_field(reader, "tokenizer.ggml.tokens", [])),
        token_types=[int(t) for t in _field(reader, "tokenizer.ggml.token_type", [])],
        merges=list(_field(reader, "tokenizer.ggml.merges", [])),
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=eos,
        pad_token_id=_field(reader, "tokenizer.ggml.padding_token_id"),
        add_bos=bool(_field(reader, "tokenizer.ggml.add_bos_token", bos_default)),
        chat_template=_field(reader, "tokenizer.chat_template"),
        model_name=str(_field(reader, "general.name", "model")),
        context_length=int(_field(reader, f"{arch}.context_length", 2048)),
        extra=extra,
        scores=[float(x) for x in _field(reader, "tokenizer.ggml.scores", [])] if spm else [],
        unk_token_id=_field(reader, "tokenizer.ggml.unknown_token_id"),
        add_space_prefix=bool(_field(reader, "tokenizer.ggml.add_space_prefix", spm)),
        architecture=str(arch),
    )


def cache_file(path: str, cache_dir: str, suffix: str = "") -> str:
    """Where something parsed from `path` is kept: keyed by the file's path, size and mtime."""
    return _cache_file(path, cache_dir).removesuffix(".json") + suffix + ".json"


def _cache_file(path: str, cache_dir: str) -> str:
    st = os.stat(path)
    key = hashlib.sha1(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:20]
    return os.path.join(cache_dir, f"{key}-v{_CACHE_VERSION}.json")


def load_tokenizer_meta(path: str, cache_dir: str | None) -> TokenizerMeta:
    """read_tokenizer_meta, memoised on disk.

    GGUFReader builds a numpy view per vocabulary string (~100k of them), which takes seconds;
    every service that counts tokens pays that at start-up, so the parsed result is cached as
    JSON keyed by the file's path, size and mtime. Cache failures only cost the slow path.
    """
    if not cache_dir:
        return read_tokenizer_meta(path)
    cache = _cache_file(path, cache_dir)
    try:
        with open(cache, encoding="utf-8") as f:
            return TokenizerMeta(**json.load(f))
    except (OSError, ValueError, TypeError):
        pass
    meta = read_tokenizer_meta(path)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{cache}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(meta), f)
        os.replace(tmp, cache)
    except OSError:
        log.warning("cannot write tokenizer cache %s", cache, exc_info=True)
    return meta
