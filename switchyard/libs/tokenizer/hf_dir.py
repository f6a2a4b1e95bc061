"""A tokenizer from a Hugging Face checkpoint directory's own files, read as their writers meant them.

- `tokenizer.json`: the `tokenizers` pipeline as it is (normalizer, pre-tokenizer, model, decoder; added
  and special tokens with the flags the file gives them). Truncation and padding a file may carry are
  turned off: a prompt is never cut or padded here.
- `tokenizer_config.json` (or the older `special_tokens_map.json`): the BOS, EOS and other named special
  tokens. BOS is added where tokenizer.json's post-processor puts a special token first (and is that
  token): that is what runs, and transformers 5 reads it alone (it drops tokenizer_config.json's
  `add_bos_token` wherever a tokenizer.json exists), so ids agree with it and with vLLM's tokenizer. An
  EOS a post-processor appends is not added: a prompt ends where the model is to go on.
- The chat template: `chat_template.jinja`, else tokenizer_config.json's `chat_template` (a string, or
  a list of named templates: "default" is used), else `chat_template.json`.
- `generation_config.json`'s `eos_token_id` (an int or a list) names every id that ends an answer
  (config.json's where there is no generation config); `config.json` gives the context length
  (`max_position_embeddings`) and the architecture (`model_type`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any, Literal

from tokenizers import Tokenizer as HFTokenizer

from switchyard.libs.tokenizer.spec import TokenizerSpec

TOKENIZER_FILE = "tokenizer.json"
# A GGUF without the key gets llama.cpp's default; a directory without one the same, so both agree.
DEFAULT_CONTEXT_LENGTH = 2048
# Named special tokens transformers hands a chat template besides bos_token and eos_token.
TEMPLATE_TOKENS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _read_json(path: str, required: bool = False) -> dict[str, Any] | None:
    got = _read_json_text(path, required)
    return None if got is None else got[0]


def _read_json_text(path: str, required: bool = False) -> tuple[dict[str, Any], str] | None:
    """The JSON object in `path` and its text; None where the file is absent and not `required`."""
    if not os.path.isfile(path):
        if required:
            raise ValueError(
                f"{path} does not exist: a Hugging Face model directory needs its {os.path.basename(path)}"
            )
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is not readable JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not readable JSON: a JSON object was expected, not {type(data).__name__}")
    return data, text


def _read_text(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not readable: {e}") from e


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"] or None
    return None


def _components(node: Any) -> Iterator[dict[str, Any]]:
    """A pipeline component and, for a Sequence, every component inside it."""
    if isinstance(node, dict):
        yield node
        for key in ("normalizers", "pretokenizers", "decoders", "processors"):
            for child in node.get(key) or []:
                yield from _components(child)


def _leading_special(post_processor: Any) -> str | None:
    """The special token a TemplateProcessing puts before a single sequence, if any."""
    for comp in _components(post_processor):
        if comp.get("type") == "TemplateProcessing":
            single = comp.get("single") or []
            first = single[0] if single else {}
            if isinstance(first, dict) and "SpecialToken" in first:
                token = first["SpecialToken"].get("id")
                return token if isinstance(token, str) else None
    return None


def _adds_space_prefix(pipeline: dict[str, Any]) -> bool:
    """Whether a leading U+2581 is put before the text (Llama 2 style SentencePiece)."""
    for comp in _components(pipeline.get("normalizer")):
        if comp.get("type") == "Prepend" and comp.get("prepend") == "\u2581":
            return True
    for comp in _components(pipeline.get("pre_tokenizer")):
        if comp.get("type") == "Metaspace":
            scheme = comp.get("prepend_scheme")
            if scheme in ("always", "first") or (scheme is None and comp.get("add_prefix_space")):
                return True
    return False


def _vocab_type(pipeline: dict[str, Any]) -> Literal["bpe", "spm"]:
    for key in ("decoder", "pre_tokenizer"):
        if any(c.get("type") == "ByteLevel" for c in _components(pipeline.get(key))):
            return "bpe"
    return "spm"


def _ids(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _chat_template(path: str, tok_config: dict[str, Any]) -> str | None:
    jinja = _read_text(os.path.join(path, "chat_template.jinja"))
    if jinja:
        return jinja
    value = tok_config.get("chat_template")
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default", next(iter(named.values()), None))
    if isinstance(value, str) and value:
        return value
    legacy = _read_json(os.path.join(path, "chat_template.json"))
    template = (legacy or {}).get("chat_template")
    return template if isinstance(template, str) and template else None


def _context_length(config: dict[str, Any], tok_config: dict[str, Any]) -> int:
    for cfg in (config, config.get("text_config") or {}):
        n = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    # transformers writes a huge sentinel where the length is unknown.
    n = tok_config.get("model_max_length")
    return n if isinstance(n, int) and 0 < n < 1 << 31 else DEFAULT_CONTEXT_LENGTH


def load_directory(path: str) -> tuple[TokenizerSpec, HFTokenizer]:
    """The spec and the pipeline of the tokenizer a Hugging Face model directory holds.

    Raises ValueError naming the file when one it needs is missing or is not readable JSON."""
    tok_file = os.path.join(path, TOKENIZER_FILE)
    got = _read_json_text(tok_file, required=True)
    assert got is not None
    pipeline, text = got
    try:
        backend = HFTokenizer.from_str(text)  # the text as read: a large file is not serialized again
    except Exception as e:  # tokenizers raises its own exception types for a pipeline it cannot build
        raise ValueError(f"{tok_file} is not a tokenizer `tokenizers` can load: {e}") from e
    backend.no_truncation()
    backend.no_padding()

    tok_config = _read_json(os.path.join(path, "tokenizer_config.json")) or {}
    legacy_map = _read_json(os.path.join(path, "special_tokens_map.json")) or {}
    config = _read_json(os.path.join(path, "config.json")) or {}
    gen_config = _read_json(os.path.join(path, "generation_config.json"))

    def named(key: str) -> str | None:
        return _token_text(tok_config.get(key)) or _token_text(legacy_map.get(key))

    leading = _leading_special(pipeline.get("post_processor"))
    # The BOS added is the one the post-processor names (the same token as tokenizer_config.json's in
    # every directory transformers writes).
    bos = leading or named("bos_token")
    eos = named("eos_token")
    bos_id = backend.token_to_id(bos) if bos else None
    eos_id = backend.token_to_id(eos) if eos else None
    gen_eos = _ids((gen_config or {}).get("eos_token_id"))
    if gen_config is None or not gen_eos:
        gen_eos = _ids(config.get("eos_token_id")) or _ids((config.get("text_config") or {}).get("eos_token_id"))
    if eos_id is None and gen_eos:
        eos_id = gen_eos[0]
    added = pipeline.get("added_tokens") or []
    spec = TokenizerSpec(
        vocab_type=_vocab_type(pipeline),
        vocab_size=backend.get_vocab_size(with_added_tokens=True),
        model_name=os.path.basename(os.path.normpath(os.path.abspath(path))),
        context_length=_context_length(config, tok_config),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        add_bos=leading is not None,
        add_space_prefix=_adds_space_prefix(pipeline),
        chat_template=_chat_template(path, tok_config),
        architecture=str(config.get("model_type") or ""),
        end_ids=frozenset(gen_eos),
        special_ids=frozenset(int(t["id"]) for t in added if isinstance(t, dict) and t.get("special")),
        template_tokens={k: v for k in TEMPLATE_TOKENS if (v := named(k)) is not None},
    )
    return spec, backend
