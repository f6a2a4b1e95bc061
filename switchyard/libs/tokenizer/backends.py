"""Hugging Face `tokenizers` pipelines that reproduce llama.cpp's tokenizers from a GGUF's metadata.

Two vocabulary kinds, as `tokenizer.ggml.model` names them:

- "gpt2": byte-level BPE. The file carries the merges; what differs between models is how text is
  cut into words first (`tokenizer.ggml.pre`), which must be llama.cpp's regexes for that name.
- "llama": SentencePiece BPE (Gemma, Llama 2, Mistral). The file carries no merges, only a score per
  token. llama.cpp merges, at each step, the adjacent pair whose concatenation is the best-scoring
  token (leftmost on a tie), over the whole fragment with spaces written as U+2581, and spells any
  character that is not a token as its UTF-8 bytes. A BPE whose merge ranks are the tokens' scores,
  run on the fragment as one word with byte fallback, is the same algorithm.

Both kinds first cut the text at every control and user-defined token (llama.cpp's special-token
partition): those become added tokens matched on the raw text.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from switchyard.libs.tokenizer.gguf_meta import TokenizerMeta

log = logging.getLogger(__name__)

CONTROL = 3
USER_DEFINED = 4
UNUSED = 5
BYTE = 6

SPACE = "\u2581"

# llama.cpp's word-splitting regexes (src/llama-vocab.cpp, llm_tokenizer_bpe), by `tokenizer.ggml.pre`.
# llama.cpp runs its list of regexes one after another, each cutting the pieces the previous left;
# text no regex matches stays a piece of its own, which is what `Split(..., "isolated")` does too.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGIT = r"\p{N}"
# name -> (regexes in order, ignore_merges: a word that is itself a token is taken whole)
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "gpt-2": ((_GPT2,), False),
    "phi-2": ((_GPT2,), False),
    "mpt": ((_GPT2,), False),
    "olmo": ((_GPT2,), False),
    "smollm": ((_DIGIT, _GPT2), False),
    "starcoder": ((_DIGIT, _GPT2), False),
    "refact": ((_DIGIT, _GPT2), False),
    "codeshell": ((_DIGIT, _GPT2), False),
    "llama3": ((_LLAMA3,), True),
    "llama-v3": ((_LLAMA3,), True),
    "llama-bpe": ((_LLAMA3,), True),
    "falcon3": ((_LLAMA3,), True),
    "dbrx": ((_LLAMA3,), False),
    "smaug-bpe": ((_LLAMA3,), False),
    "qwen2": ((_QWEN2,), False),
    "deepseek-r1-qwen": ((_QWEN2,), False),
    "stablelm2": ((_QWEN2,), False),
}


def _added_tokens(meta: TokenizerMeta) -> tuple[list[AddedToken], list[AddedToken]]:
    """Control tokens (special: skipped by decode(skip_special_tokens=True)) and user-defined ones
    (plain text), both matched whole in the raw text before anything else, as llama.cpp does."""
    control, user = [], []
    for tok, ty in zip(meta.tokens, meta.token_types, strict=False):
        if ty == CONTROL and tok:
            control.append(AddedToken(tok, special=True, normalized=False))
        elif ty == USER_DEFINED and tok:
            user.append(AddedToken(tok, special=False, normalized=False))
    return control, user


def _with_added(tk: HFTokenizer, meta: TokenizerMeta) -> HFTokenizer:
    control, user = _added_tokens(meta)
    tk.add_special_tokens(control)
    if user:
        tk.add_tokens(user)
    return tk


def bpe_backend(meta: TokenizerMeta) -> HFTokenizer:
    """Byte-level BPE ("gpt2") with the word splitting llama.cpp uses for this file's `pre`."""
    if meta.pre not in PRE_TOKENIZERS:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise ValueError(f"unsupported BPE pre-tokenizer {meta.pre!r} (supported: {known})")
    regexes, ignore_merges = PRE_TOKENIZERS[meta.pre]
    vocab = {tok: i for i, tok in enumerate(meta.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in meta.merges]
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=ignore_merges)  # type: ignore[arg-type]
    tk = HFTokenizer(bpe)
    steps: list[Any] = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tk.decoder = decoders.ByteLevel()
    return _with_added(tk, meta)


def spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """The merges llama.cpp's SentencePiece tokenizer effectively applies, best first.

    llama.cpp may join two adjacent pieces whenever their concatenation is any token, preferring the
    higher score; so every split of every token into two tokens is a merge, ranked by the joined
    token's score. Splits of one token keep the order of their left part's length (any order is
    equivalent: two splits of one token cannot be adjacent pairs at once)."""
    ids = {tok: i for i, tok in enumerate(tokens)}
    ranked: list[tuple[float, int, str, str]] = []
    for i, tok in enumerate(tokens):
        if ids.get(tok) != i or len(tok) < 2:
            continue  # a duplicate spelling: llama.cpp's text-to-token map keeps the last one
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[i], i, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def spm_backend(meta: TokenizerMeta) -> HFTokenizer:
    """SentencePiece BPE ("llama") as llama.cpp runs it: spaces as U+2581, a leading one where the
    file says add_space_prefix (after every special token too), one word per fragment, byte fallback."""
    if not meta.scores or len(meta.scores) != len(meta.tokens):
        raise ValueError("a SentencePiece GGUF vocabulary needs tokenizer.ggml.scores for every token")
    vocab = {tok: i for i, tok in enumerate(meta.tokens)}
    unk = meta.tokens[meta.unk_token_id] if meta.unk_token_id is not None else None
    bpe = models.BPE(
        vocab=vocab,
        merges=spm_merges(meta.tokens, meta.scores),  # type: ignore[arg-type]
        unk_token=unk,
        fuse_unk=True,
        byte_fallback=True,
    )
    tk = HFTokenizer(bpe)
    norm: list[Any] = [normalizers.Prepend(SPACE)] if meta.add_space_prefix else []
    norm.append(normalizers.Replace(" ", SPACE))
    tk.normalizer = normalizers.Sequence(norm)
    dec: list[Any] = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if meta.add_space_prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    tk.decoder = decoders.Sequence(dec)
    return _with_added(tk, meta)


# Bump when a pipeline built here changes, so cached ones (load_backend) are rebuilt.
BACKEND_VERSION = 1


def load_backend(meta: TokenizerMeta, cache: str | None) -> HFTokenizer:
    """build_backend, kept as the pipeline's JSON at `cache`: a SentencePiece vocabulary's merges
    (half a million for Gemma) take seconds to derive, loading them back about one."""
    if cache:
        try:
            return HFTokenizer.from_file(cache)
        except Exception:  # missing or unreadable: rebuild (tokenizers raises its own exception types)
            pass
    tk = build_backend(meta)
    if cache:
        try:
            os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
            tmp = f"{cache}.{os.getpid()}.tmp"
            tk.save(tmp, pretty=False)
            os.replace(tmp, cache)
        except OSError:
            log.warning("cannot write tokenizer cache %s", cache, exc_info=True)
    return tk


def build_backend(meta: TokenizerMeta) -> HFTokenizer:
    if meta.model == "gpt2":
        return bpe_backend(meta)
    if meta.model == "llama":
        return spm_backend(meta)
    raise ValueError(
        f"unsupported GGUF tokenizer model {meta.model!r}: byte-level BPE (gpt2) and SentencePiece (llama) are"
    )
