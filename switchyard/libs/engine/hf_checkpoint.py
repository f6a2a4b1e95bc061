"""Write a Hugging Face checkpoint directory (config, tokenizer, safetensors) from the GGUF we serve.

Engines that load Hugging Face checkpoints (TensorRT-LLM; vLLM on CPU, which has no GGUF loader) get
the same weights and the same vocabulary as the native engine this way, offline: transformers reads
the GGUF (`gguf_file=`), dequantizes it, and the GGUF quantization marker is cleared so the
dequantized weights can be saved. tokenizer.json is our GGUF tokenizer's pipeline (equal to llama.cpp's):
transformers' GGUF reader drops some of llama.cpp's pre-tokenizers (SmolLM2's digit split), and a
directory is tokenized by its own tokenizer.json, so the directory reads as the file does. The files
are written for readers on transformers 4.x as well
(TensorRT-LLM pins one): `rope_theta` and `torch_dtype` at the top of config.json, a
`PreTrainedTokenizerFast` tokenizer class and the chat template inside tokenizer_config.json.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterator
from typing import Any

DTYPES = ("float32", "bfloat16", "float16")


@contextlib.contextmanager
def _fast_gguf_names() -> Iterator[None]:
    """transformers rebuilds gguf's (pure) tensor-name map per tensor (about a minute); memoised, seconds."""
    import gguf

    orig = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(orig)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = orig


def _rewrite_json(path: str, update: Any) -> None:
    with open(path) as f:
        data = json.load(f)
    update(data)
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def _write_our_tokenizer(gguf_path: str, out: str) -> None:
    """tokenizer.json as our tokenizer runs the GGUF, with the post-processor that adds BOS where the file
    says it is added (a directory's BOS is its post-processor's: switchyard/libs/tokenizer/hf_dir.py)."""
    from tokenizers import processors

    from switchyard.libs.tokenizer.backends import build_backend
    from switchyard.libs.tokenizer.gguf_meta import read_tokenizer_meta

    meta = read_tokenizer_meta(gguf_path)
    tk = build_backend(meta)
    if meta.add_bos and meta.bos_token_id is not None:
        bos = meta.tokens[meta.bos_token_id]
        tk.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, meta.bos_token_id)]
        )
    tk.save(out)


def write_hf_checkpoint(gguf_path: str, out_dir: str, dtype: str = "float32") -> list[str]:
    """Write the checkpoint into out_dir (created); returns the file names written."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}")
    import torch
    import transformers

    src_dir, name = os.path.dirname(os.path.abspath(gguf_path)), os.path.basename(gguf_path)
    with _fast_gguf_names():
        tokenizer = transformers.AutoTokenizer.from_pretrained(src_dir, gguf_file=name, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            src_dir, gguf_file=name, dtype=getattr(torch, dtype), local_files_only=True
        )
    # The weights are dequantized already; the marker only stops save_pretrained.
    setattr(model, "hf_quantizer", None)  # noqa: B010 (typed as a Module attribute by torch)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    _write_our_tokenizer(gguf_path, os.path.join(out_dir, "tokenizer.json"))
    context = int(getattr(model.config, "max_position_embeddings", 0) or 0)

    def config_for_4x(cfg: dict[str, Any]) -> None:
        rope = cfg.get("rope_parameters") or {}
        if "rope_theta" not in cfg and "rope_theta" in rope:
            cfg["rope_theta"] = rope["rope_theta"]
        cfg.setdefault("torch_dtype", dtype)

    def tokenizer_for_4x(cfg: dict[str, Any]) -> None:
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        for key in ("backend", "is_local", "local_files_only"):
            cfg.pop(key, None)
        if context:
            cfg["model_max_length"] = context
        template = os.path.join(out_dir, "chat_template.jinja")
        if "chat_template" not in cfg and os.path.isfile(template):
            with open(template) as f:
                cfg["chat_template"] = f.read()

    _rewrite_json(os.path.join(out_dir, "config.json"), config_for_4x)
    _rewrite_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_for_4x)
    return sorted(os.listdir(out_dir))
