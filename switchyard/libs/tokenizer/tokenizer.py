"""Tokenizer (byte-level BPE or SentencePiece) and chat template, built only from a GGUF file's metadata."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from switchyard.libs.tokenizer.backends import BACKEND_VERSION, CONTROL, build_backend, load_backend
from switchyard.libs.tokenizer.gguf_meta import TokenizerMeta, cache_file, load_tokenizer_meta
from switchyard.libs.tokenizer.template import model_template, render_prompt


class Tokenizer:
    """Encode/decode and chat-template rendering for one GGUF model."""

    def __init__(self, meta: TokenizerMeta, backend: HFTokenizer | None = None) -> None:
        self._meta = meta
        self._backend = backend or build_backend(meta)
        # "bpe": byte-level BPE (tokens spelled in GPT-2's byte alphabet); "spm": SentencePiece
        # (U+2581 for spaces, <0xXX> byte tokens).
        self.vocab_type = "bpe" if meta.model == "gpt2" else "spm"
        self.vocab_size = len(meta.tokens)
        self.model_name = meta.model_name
        self.context_length = meta.context_length
        self.bos_token_id = meta.bos_token_id
        self.eos_token_id = meta.eos_token_id
        self.add_bos = meta.add_bos
        self.add_space_prefix = meta.add_space_prefix
        self.bos_token = meta.tokens[meta.bos_token_id] if meta.bos_token_id is not None else ""
        self.eos_token = meta.tokens[meta.eos_token_id] if meta.eos_token_id is not None else ""
        # The file's chat template, or the named fallback for its architecture (template.py).
        self.template = model_template(
            meta.chat_template, meta.architecture, self.bos_token, self.eos_token, tokenizer_adds_bos=meta.add_bos
        )
        # Only a file's own template makes a chat model; a fallback is a best effort for base models.
        self.has_chat_template = self.template.from_file
        eos: set[int] = set()
        if meta.eos_token_id is not None:
            eos.add(int(meta.eos_token_id))
        if "eot_token_id" in meta.extra:
            eos.add(int(meta.extra["eot_token_id"]))
        # Chat models end a turn with their template's end marker; treat it as EOS too.
        for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
            tid = self._backend.token_to_id(marker)
            if tid is not None and marker in self.template.source:
                eos.add(tid)
        self.eos_token_ids: set[int] = eos
        self.special_ids = {i for i, ty in enumerate(meta.token_types) if ty == CONTROL}
        self._lock = threading.Lock()

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`, special tokens written in it parsed as tokens (llama.cpp's
        parse_special); BOS first where the file says so, or where `add_bos` asks."""
        ids: list[int] = self._backend.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_token_id is not None:
            ids = [int(self.bos_token_id), *ids]
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._backend.id_to_token(token_id)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """`render_prompt` with this model's template."""
        return render_prompt(self.template, messages, tools, add_generation_prompt)


_CACHE: dict[str, Tokenizer] = {}
_CACHE_LOCK = threading.Lock()


DEFAULT_CACHE_DIR = os.path.join("var", "cache", "tokenizer")


def load_tokenizer(gguf_path: str | None = None, cache_dir: str | None = None) -> Tokenizer:
    """The tokenizer of a GGUF file (default: the bundled SmolLM2), built once per path. Its parsed
    metadata and built pipeline are kept under `cache_dir` (None: var/cache/tokenizer; "": not kept)."""
    if gguf_path is None:
        from switchyard.libs.tokenizer.paths import default_model_path

        gguf_path = default_model_path()
    with _CACHE_LOCK:
        tok = _CACHE.get(gguf_path)
        if tok is None:
            cache = DEFAULT_CACHE_DIR if cache_dir is None else cache_dir
            meta = load_tokenizer_meta(gguf_path, cache or None)
            backend_file = cache_file(gguf_path, cache, f"-hf{BACKEND_VERSION}") if cache else None
            tok = Tokenizer(meta, load_backend(meta, backend_file))
            _CACHE[gguf_path] = tok
        return tok
