"""What a Tokenizer is built from besides its `tokenizers` pipeline, whichever files it was read from (a
GGUF's metadata, or a Hugging Face directory's JSON files)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# Chat models end a turn with their template's end marker; where the template writes one it is an EOS too.
END_OF_TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


@dataclass(frozen=True)
class TokenizerSpec:
    # "bpe": byte-level BPE (tokens spelled in GPT-2's byte alphabet); "spm": SentencePiece-style
    # (U+2581 for spaces, <0xXX> byte tokens).
    vocab_type: Literal["bpe", "spm"]
    vocab_size: int
    model_name: str
    context_length: int
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos: bool
    add_space_prefix: bool
    chat_template: str | None
    architecture: str
    # Ids that end an answer besides eos_token_id (a GGUF's end-of-turn id, generation_config's EOS list).
    end_ids: frozenset[int] = frozenset()
    # Control tokens: never text (decode(skip_special_tokens=True) drops them, grammars never admit them).
    special_ids: frozenset[int] = frozenset()
    # Special tokens a template may name besides bos_token and eos_token (pad_token, unk_token...).
    template_tokens: Mapping[str, str] = field(default_factory=dict)
