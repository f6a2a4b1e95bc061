"""GGUF -> torch weights, with an on-disk cache of the converted tensors.

Dequantizing every Q4_1 tensor with the `gguf` package's numpy code takes seconds; the cache
(keyed by the file's content hash and the target dtype) makes a restart a single torch.load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from switchyard.libs.engine.formats import BLOCK_SUFFIXES, format_of
from switchyard.libs.engine.kernels import PACKED, UNPACKED_SUFFIXES, pack_blocks, quantize_int8, quantize_q8_0
from switchyard.libs.engine.models import (
    GGUF_REGISTRY,
    GgufMeta,
    ModelConfig,
    for_gguf,
    for_hf,
)

log = logging.getLogger(__name__)

_CACHE_VERSION = 10

# GGUF architectures the native model serves (models.GGUF_REGISTRY).
ARCHITECTURES = tuple(sorted(GGUF_REGISTRY))
LlamaConfig = ModelConfig  # the name earlier callers import


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation so that HF's rotate-half RoPE applies.

    convert_hf_to_gguf reorders each head's rows from [half0, half1] to interleaved pairs;
    inverting it lets our attention match transformers bit-for-bit in layout.
    """
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_gguf(path: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Dequantize a GGUF of a served architecture (models.for_gguf) into float32 tensors named by
    GGUF's own tensor names, in the internal form every definition brings its tensors to.

    A matrix stored in 4-bit blocks (Q4_0, Q4_1) also keeps those blocks, as `<name>.q4` (values)
    and `<name>.q4dm` (scales and minimums), for the int4 kernel (see kernels.Int4Weight); one in
    Q8_0 blocks keeps `<name>.q8` (values) and `<name>.q8d` (scales), for the native kernels.
    """
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path, "r")
    arch = _field(reader, "general.architecture", "llama")
    definition = for_gguf(arch)
    meta = GgufMeta(reader, arch)
    n_head = int(meta.get("attention.head_count"))
    n_kv = int(meta.get("attention.head_count_kv", n_head))
    permuted = definition.gguf_qk_interleaved
    tensors: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        arr = dequantize(t.data, t.tensor_type)
        # GGUF lists dims fastest-first; numpy data is already [out, in] row-major.
        arr = np.asarray(arr, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])
        parts = {t.name: arr}
        if arr.ndim == 2:
            fmt = format_of(t.tensor_type.name)
            parts.update({t.name + s: a for s, a in fmt.blocks(np.asarray(t.data), arr).items()})
        for name, a in parts.items():
            # Rows are permuted alike in the dequantized matrix and in its blocks.
            if permuted and t.name.endswith("attn_q.weight"):
                a = _unpermute(a, n_head)
            elif permuted and t.name.endswith("attn_k.weight"):
                a = _unpermute(a, n_kv)
            tensors[name] = torch.from_numpy(np.array(a, copy=True))
    cfg = definition.config_from_gguf(meta, tensors)
    return cfg, definition.split_fused(tensors, cfg)


def read_hf(directory: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """A Hugging Face checkpoint directory (config.json, *.safetensors in fp32/bf16/fp16) of a
    served architecture (models.for_hf), as float32 tensors in the same internal form as read_gguf:
    GGUF's tensor names (gguf's own name map), fused matrices split, Llama 3's RoPE factors added.
    Its Q/K rows are already in rotate-half order."""
    import gguf
    from safetensors.torch import load_file

    with open(os.path.join(directory, "config.json")) as f:
        hf = json.load(f)
    definition = for_hf(list(hf.get("architectures") or []))
    # gguf's name map of the GGUF architecture the family converts to (Mistral: llama's).
    arch = (definition.gguf_archs or ("llama",))[0]
    by_name = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}
    names = gguf.get_tensor_name_map(by_name[arch], int(hf["num_hidden_layers"]))
    files = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors files in {directory}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        for hf_name, t in load_file(os.path.join(directory, file)).items():
            name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise ValueError(f"{hf_name} of {directory} has no place in a {definition.family} model")
            tensors[name] = t.float().contiguous()
    cfg = definition.config_from_hf(hf, tensors)
    return cfg, definition.split_fused(tensors, cfg)


def read_model(path: str) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """A GGUF file or a Hugging Face checkpoint directory, read into the one internal form."""
    return read_hf(path) if os.path.isdir(path) else read_gguf(path)


def convert(tensors: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """Cast to a serving format (see switchyard/libs/engine/kernels.py for why each exists).

    fp32: everything fp32. bf16 / int8: matrices in bf16 / int8 (per-row scales), norms and the
    embedding table stay fp32. hybrid: a bf16 copy of every matrix and a quantized one, the
    GGUF's own 4-bit blocks where it has them (`.q4`, `.q4dm`) and int8 otherwise; the model
    picks one per step. native: the GGUF's own blocks for the native kernels (4-bit `.q4`/`.q4dm`
    or 8-bit `.q8`/`.q8d`; Q8_0 blocks made here for a matrix stored unquantized, int8 for one
    whose width is not a multiple of 32).
    A tied output projection gets its own copy in the matrix format.
    """
    if dtype not in ("fp32", "bf16", "int8", "hybrid", "native"):
        raise ValueError(f"unknown weight format {dtype!r}")
    blocks = {n: t for n, t in tensors.items() if n.endswith(BLOCK_SUFFIXES)}
    tensors = {n: t for n, t in tensors.items() if n not in blocks}
    tied = "output.weight" not in tensors
    out: dict[str, torch.Tensor] = {}
    if tied and dtype != "fp32":
        tensors["output.weight"] = tensors["token_embd.weight"]
        for suffix in BLOCK_SUFFIXES:
            if "token_embd.weight" + suffix in blocks:
                blocks["output.weight" + suffix] = blocks["token_embd.weight" + suffix]
    if dtype == "native" and "token_embd.weight.q8" in blocks:
        # The embedding stays in the file's 8-bit blocks, a row dequantized when looked up
        # (model.Embedding): the same values as the fp32 table at a quarter of its bytes. Where the
        # head is tied, its blocks are the embedding's, and rows are looked up in the head's
        # (packed) copy: Gemma 3's 262k x 640 table costs 168 MiB once, not 671 + 168.
        if tied:
            tensors = {n: t for n, t in tensors.items() if n != "token_embd.weight"}
        else:
            out["token_embd.weight.q8"] = blocks["token_embd.weight.q8"]
            out["token_embd.weight.q8d"] = blocks["token_embd.weight.q8d"]
            tensors = {n: t for n, t in tensors.items() if n != "token_embd.weight"}
    for name, t in tensors.items():
        is_matrix = t.dim() == 2 and name != "token_embd.weight"
        if not is_matrix or dtype == "fp32":
            out[name] = t.to(torch.float32)
            continue
        if dtype in ("bf16", "hybrid"):
            out[name] = t.to(torch.bfloat16).contiguous()
        if dtype == "hybrid" and name + ".q4" in blocks:
            out[name + ".q4"], out[name + ".q4dm"] = blocks[name + ".q4"], blocks[name + ".q4dm"]
        elif dtype == "native" and name + ".q4" in blocks:
            out[name + ".q4"], out[name + ".q4dm"] = blocks[name + ".q4"], blocks[name + ".q4dm"]
        elif dtype == "native" and name + ".q8" in blocks:
            out[name + ".q8"], out[name + ".q8d"] = blocks[name + ".q8"], blocks[name + ".q8d"]
        elif dtype == "native" and t.shape[1] % 32 == 0:
            out[name + ".q8"], out[name + ".q8d"] = quantize_q8_0(t)
        elif dtype in ("int8", "hybrid", "native"):
            out[name + ".q"], out[name + ".scale"] = quantize_int8(t)
    return out


# The matrices a layer multiplies as one, in the order they are stacked.
FUSED = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def stack_parts(t: dict[str, torch.Tensor], prefix: str, parts: tuple[str, ...], name: str) -> dict[str, torch.Tensor]:
    """The matrices `<prefix><part>.weight` stacked into one, as `<name><suffix>` tensors for each
    stored form (dense, int8, 4-bit or 8-bit blocks) that every part has."""
    out = {}
    for suffix in UNPACKED_SUFFIXES:
        names = [f"{prefix}{part}.weight{suffix}" for part in parts]
        if all(n in t for n in names):
            out[name + suffix] = torch.cat([t[n] for n in names]).contiguous()
    return out


def pack_native(tensors: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """`convert(..., "native")` as the model serves it: each layer's q, k, v and gate, up stacked
    (`blk.N.attn_qkv.weight`, `blk.N.ffn_gate_up.weight`) and every 4-bit matrix in the kernels'
    layout (kernels.pack_blocks). The cache keeps this form, so the model maps it as it is: packing
    at load read the GGUF's blocks, and those pages of the mapped cache stayed resident beside their
    packed copies (about 130 MiB for the default model). Unchanged where a layer's parts differ in
    storage (they cannot be stacked)."""
    out = dict(tensors)
    for i in range(num_layers):
        for fused, parts in FUSED.items():
            prefix = f"blk.{i}."
            stacked = stack_parts(out, prefix, parts, f"{prefix}{fused}.weight")
            part_names = [n for n in out if n.startswith(tuple(f"{prefix}{part}.weight." for part in parts))]
            # Every stored tensor of every part went into the stack, or nothing is stacked here.
            if not stacked or len(part_names) != len(stacked) * len(parts):
                return tensors
            for n in part_names:
                del out[n]
            out.update(stacked)
    # Every matrix of GGUF blocks in its kernels' layout; plain 8-bit rows (that do not interleave)
    # stay as read.
    # (The embedding's blocks stay as read: rows are looked up, not multiplied.)
    for name in [n[: -len(".q4")] for n in out if n.endswith((".q4", ".q8")) and not n.startswith("token_embd.")]:
        w = pack_blocks(out, name)
        assert w is not None
        if w.layout not in PACKED:
            continue
        for suffix in BLOCK_SUFFIXES:
            out.pop(name + suffix, None)
        out.update({name + suffix: part for suffix, part in zip(PACKED[w.layout], w.parts, strict=True)})
    return out


def _file_key(path: str) -> str:
    """The content hash of a GGUF, or of a checkpoint directory's config and weight files."""
    h = hashlib.sha256()
    files = [path]
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n == "config.json" or n.endswith(".safetensors"))
        files = [os.path.join(path, n) for n in names]
    for file in files:
        h.update(os.path.basename(file).encode())
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()[:24]


def load_weights(path: str, dtype: str, cache_dir: str | None) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Converted weights for `path` (a GGUF file or a checkpoint directory) in `dtype`, from the
    disk cache when present."""
    cache_file = None
    if cache_dir:
        cache_file = os.path.join(cache_dir, f"{_file_key(path)}-{dtype}-v{_CACHE_VERSION}.pt")
        if os.path.exists(cache_file):
            try:
                blob = torch.load(cache_file, map_location="cpu", weights_only=True, mmap=True)
                return ModelConfig(**blob["config"]), blob["tensors"]
            except Exception:  # a torn or stale cache file is just a miss
                log.warning("ignoring unreadable weight cache %s", cache_file, exc_info=True)
    cfg, raw = read_model(path)
    tensors = convert(raw, dtype)
    if dtype == "native":
        tensors = pack_native(tensors, cfg.num_layers)
    if cache_file:
        os.makedirs(os.path.dirname(cache_file), exist_ok=True)
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        torch.save({"config": asdict(cfg), "tensors": tensors}, tmp)
        os.replace(tmp, cache_file)  # atomic: concurrent starters never read half a file
    return cfg, tensors
