"""Tokenizer (byte-level BPE or SentencePiece) and chat template, built from a GGUF file's metadata or
from a Hugging Face checkpoint directory's own files (hf_dir.py)."""

from __future__ import annotations

import bisect
import dataclasses
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from switchyard.libs.tokenizer.backends import BACKEND_VERSION, CONTROL, build_backend, load_backend
from switchyard.libs.tokenizer.gguf_meta import TokenizerMeta, cache_file, load_tokenizer_meta
from switchyard.libs.tokenizer.literal import LITERAL, ControlSpellings, escape, unescape
from switchyard.libs.tokenizer.spec import END_OF_TURN_MARKERS, TokenizerSpec
from switchyard.libs.tokenizer.template import model_template, render_prompt


def gguf_spec(meta: TokenizerMeta) -> TokenizerSpec:
    return TokenizerSpec(
        vocab_type="bpe" if meta.model == "gpt2" else "spm",
        vocab_size=len(meta.tokens),
        model_name=meta.model_name,
        context_length=meta.context_length,
        bos_token_id=meta.bos_token_id,
        eos_token_id=meta.eos_token_id,
        add_bos=meta.add_bos,
        add_space_prefix=meta.add_space_prefix,
        chat_template=meta.chat_template,
        architecture=meta.architecture,
        end_ids=frozenset([int(meta.extra["eot_token_id"])] if "eot_token_id" in meta.extra else []),
        special_ids=frozenset(i for i, ty in enumerate(meta.token_types) if ty == CONTROL),
    )


class Tokenizer:
    """Encode/decode and chat-template rendering for one model (a GGUF file or a Hugging Face directory)."""

    def __init__(self, meta: TokenizerMeta, backend: HFTokenizer | None = None) -> None:
        self._meta: TokenizerMeta | None = meta
        self._setup(gguf_spec(meta), backend or build_backend(meta))

    @classmethod
    def from_spec(cls, spec: TokenizerSpec, backend: HFTokenizer) -> Tokenizer:
        """A tokenizer whose facts were read from elsewhere than a GGUF (a Hugging Face directory)."""
        tok = cls.__new__(cls)
        tok._meta = None
        tok._setup(spec, backend)
        return tok

    def _setup(self, spec: TokenizerSpec, backend: HFTokenizer) -> None:
        self.spec = spec
        self._backend = backend
        self.vocab_type = spec.vocab_type
        self.vocab_size = spec.vocab_size
        self.model_name = spec.model_name
        self.context_length = spec.context_length
        self.bos_token_id = spec.bos_token_id
        self.eos_token_id = spec.eos_token_id
        self.add_bos = spec.add_bos
        self.add_space_prefix = spec.add_space_prefix
        self.bos_token = self._spelling(spec.bos_token_id)
        self.eos_token = self._spelling(spec.eos_token_id)
        self.special_ids: set[int] = set(spec.special_ids)
        self.controls = ControlSpellings(self._spelling(i) for i in self.special_ids)
        # The same pipeline with special tokens not parsed (`split_special_tokens`), built on first use.
        self._plain: HFTokenizer | None = None
        # The file's chat template, or the named fallback for its architecture (template.py).
        template = model_template(
            spec.chat_template, spec.architecture, self.bos_token, self.eos_token, tokenizer_adds_bos=spec.add_bos
        )
        self.template = dataclasses.replace(template, extra=dict(spec.template_tokens), controls=self.controls)
        # Only a file's own template makes a chat model; a fallback is a best effort for base models.
        self.has_chat_template = self.template.from_file
        eos: set[int] = set(spec.end_ids)
        if spec.eos_token_id is not None:
            eos.add(int(spec.eos_token_id))
        for marker in END_OF_TURN_MARKERS:
            tid = self._backend.token_to_id(marker)
            if tid is not None and marker in self.template.source:
                eos.add(tid)
        self.eos_token_ids: set[int] = eos
        self._lock = threading.Lock()

    def _spelling(self, token_id: int | None) -> str:
        if token_id is None:
            return ""
        if self._meta is not None:
            return self._meta.tokens[token_id]
        return self._backend.id_to_token(token_id) or ""

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`, special tokens written in it parsed as tokens (llama.cpp's
        parse_special) except where `render_prompt` marked them as content's (literal.py: those are
        plain text, as with `split_special_tokens`); BOS first where the file says so, or where
        `add_bos` asks."""
        if LITERAL in text:
            ids = self._encode_marked(text)
        else:
            ids = self._backend.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_token_id is not None:
            ids = [int(self.bos_token_id), *ids]
        return ids

    def literal(self, text: str) -> str:
        """`text` marked as content for a prompt string: `encode` reads its control spellings as text."""
        return escape(text, self.controls)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: a control token's spelling in it is its characters
        (HF's `split_special_tokens`, llama.cpp's parse_special=false). No BOS."""
        return list(self._plain_backend().encode(text, add_special_tokens=False).ids)

    def _plain_backend(self) -> HFTokenizer:
        with self._lock:
            if self._plain is None:
                plain = HFTokenizer.from_str(self._backend.to_str())
                plain.encode_special_tokens = True
                self._plain = plain
            return self._plain

    def _encode_marked(self, text: str) -> list[int]:
        """`encode` of a prompt holding marked content: the control tokens the template wrote stay, and
        each stretch between two of them that holds a marked spelling is encoded as plain text (so text
        without marks gets exactly the ids it always did)."""
        clean, spans = unescape(text, self.controls)
        enc = self._backend.encode(clean, add_special_tokens=False)
        ids: list[int] = enc.ids
        if not spans:
            return ids
        starts = [a for a, _ in spans]

        def marked(start: int, end: int) -> bool:
            # Whether [start, end) overlaps a marked spelling (spans are sorted and never overlap).
            i = bisect.bisect_right(starts, start)
            return (i > 0 and spans[i - 1][1] > start) or (i < len(spans) and spans[i][0] < end)

        out: list[int] = []
        first = 0  # first token of the current stretch
        begin = 0  # where the current stretch's text begins
        dirty = False
        for i, (tid, (a, b)) in enumerate(zip(ids, enc.offsets, strict=True)):
            if tid not in self.special_ids:
                continue
            if marked(a, b):
                dirty = True
                continue
            out += self.encode_text(clean[begin:a]) if dirty else ids[first:i]
            out.append(tid)
            first, begin, dirty = i + 1, b, False
        out += self.encode_text(clean[begin:]) if dirty else ids[first:]
        return out

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


def load_tokenizer(path: str | None = None, cache_dir: str | None = None) -> Tokenizer:
    """The tokenizer of a model (default: the bundled SmolLM2), built once per path: a GGUF file, or a
    Hugging Face checkpoint directory (hf_dir.py; ValueError naming the file it cannot read). A GGUF's
    parsed metadata and built pipeline are kept under `cache_dir` (None: var/cache/tokenizer; "": not
    kept); a directory's tokenizer.json already is a built pipeline."""
    if path is None:
        from switchyard.libs.tokenizer.paths import default_model_path

        path = default_model_path()
    with _CACHE_LOCK:
        tok = _CACHE.get(path)
        if tok is None:
            if os.path.isdir(path):
                from switchyard.libs.tokenizer.hf_dir import load_directory

                tok = Tokenizer.from_spec(*load_directory(path))
            else:
                cache = DEFAULT_CACHE_DIR if cache_dir is None else cache_dir
                meta = load_tokenizer_meta(path, cache or None)
                backend_file = cache_file(path, cache, f"-hf{BACKEND_VERSION}") if cache else None
                tok = Tokenizer(meta, load_backend(meta, backend_file))
            _CACHE[path] = tok
        return tok
