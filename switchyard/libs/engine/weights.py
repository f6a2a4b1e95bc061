"""GGUF -> torch weights, with an on-disk cache of the converted tensors.

Dequantizing every Q4_1 tensor with the `gguf` package's numpy code takes seconds; the cache
(keyed by the file's content hash and the target dtype) makes a restart a single torch.load.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from switchyard.libs.engine.formats import format_of
from switchyard.libs.engine.kernels import PACKED, pack_blocks, quantize_int8, quantize_q8_0

log = logging.getLogger(__name__)

_CACHE_VERSION = 9

# GGUF architectures the native model serves (model.LlamaModel).
ARCHITECTURES = ("llama", "gemma3")
# The longest context the RoPE tables are built for: Gemma 3's file says 32768, and its two
# tables (global and local bases) of that many positions x 256 would take 128 MiB of fp32.
MAX_SERVED_POSITIONS = 8192


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_eps: float
    max_position: int
    tie_embeddings: bool
    # Gemma 3 (arch "gemma3"): the embedding scaled by sqrt(hidden), QK-norm, post-attention and
    # post-FFN norms, GeGLU (gelu tanh), and every layer but each `swa_pattern`-th a sliding-window
    # layer (the last `sliding_window` keys, RoPE base `rope_local_theta`), as llama.cpp reads it.
    arch: str = "llama"
    embed_scale: float = 1.0
    sliding_window: int = 0
    swa_pattern: int = 0  # layer i is windowed iff i % swa_pattern < swa_pattern - 1 (0: none)
    rope_local_theta: float = 10000.0

    def window(self, layer: int) -> int:
        """The keys layer `layer` attends to back from a query, itself included (0: all)."""
        p = self.swa_pattern
        return self.sliding_window if p and layer % p < p - 1 else 0


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


_BLOCK_SUFFIXES = (".q4", ".q4dm", ".q8", ".q8d")


def read_gguf(path: str) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """Dequantize a Llama GGUF into float32 tensors named by GGUF's own tensor names.

    A matrix stored in 4-bit blocks (Q4_0, Q4_1) also keeps those blocks, as `<name>.q4` (values)
    and `<name>.q4dm` (scales and minimums), for the int4 kernel (see kernels.Int4Weight); one in
    Q8_0 blocks keeps `<name>.q8` (values) and `<name>.q8d` (scales), for the native kernels.
    """
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path, "r")
    arch = _field(reader, "general.architecture", "llama")
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"architecture {arch!r} is not served by the native engine (served: {', '.join(ARCHITECTURES)})"
        )
    n_head = int(_field(reader, f"{arch}.attention.head_count"))
    n_kv = int(_field(reader, f"{arch}.attention.head_count_kv", n_head))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    # llama.cpp's converter interleaves Llama's Q/K rows for its GPT-J-style RoPE; Gemma's rope is
    # NEOX-style (rotate-half) on rows left in the checkpoint's order.
    permuted = arch == "llama"
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
    head_dim = int(
        _field(reader, f"{arch}.rope.dimension_count", _field(reader, f"{arch}.attention.key_length", hidden // n_head))
    )
    gemma = arch == "gemma3"
    cfg = LlamaConfig(
        vocab_size=int(tensors["token_embd.weight"].shape[0]),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_field(reader, f"{arch}.block_count")),
        num_heads=n_head,
        num_kv_heads=n_kv,
        head_dim=head_dim,
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position=min(int(_field(reader, f"{arch}.context_length", 2048)), MAX_SERVED_POSITIONS),
        tie_embeddings="output.weight" not in tensors,
        arch=arch,
        # llama.cpp scales by sqrtf(n_embd) in fp32 (src/models/gemma3.cpp).
        embed_scale=float(np.sqrt(np.float32(hidden))) if gemma else 1.0,
        sliding_window=int(_field(reader, f"{arch}.attention.sliding_window", 0)) if gemma else 0,
        # llama-model.cpp: set_swa_pattern(6) and rope_freq_base_train_swa = 10000 for gemma3.
        swa_pattern=6 if gemma else 0,
        rope_local_theta=10000.0,
    )
    return cfg, tensors


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
    blocks = {n: t for n, t in tensors.items() if n.endswith(_BLOCK_SUFFIXES)}
    tensors = {n: t for n, t in tensors.items() if n not in blocks}
    tied = "output.weight" not in tensors
    out: dict[str, torch.Tensor] = {}
    if tied and dtype != "fp32":
        tensors["output.weight"] = tensors["token_embd.weight"]
        for suffix in _BLOCK_SUFFIXES:
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
    for suffix in ("", ".q", ".scale", ".q4", ".q4dm", ".q8", ".q8d"):
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
        for suffix in _BLOCK_SUFFIXES:
            out.pop(name + suffix, None)
        out.update({name + suffix: part for suffix, part in zip(PACKED[w.layout], w.parts, strict=True)})
    return out


def _file_key(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:24]


def load_weights(path: str, dtype: str, cache_dir: str | None) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
    """Converted weights for `path` in `dtype`, from the disk cache when present."""
    cache_file = None
    if cache_dir:
        cache_file = os.path.join(cache_dir, f"{_file_key(path)}-{dtype}-v{_CACHE_VERSION}.pt")
        if os.path.exists(cache_file):
            try:
                blob = torch.load(cache_file, map_location="cpu", weights_only=True, mmap=True)
                return LlamaConfig(**blob["config"]), blob["tensors"]
            except Exception:  # a torn or stale cache file is just a miss
                log.warning("ignoring unreadable weight cache %s", cache_file, exc_info=True)
    cfg, raw = read_gguf(path)
    tensors = convert(raw, dtype)
    if dtype == "native":
        tensors = pack_native(tensors, cfg.num_layers)
    if cache_file:
        os.makedirs(os.path.dirname(cache_file), exist_ok=True)
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        torch.save({"config": asdict(cfg), "tensors": tensors}, tmp)
        os.replace(tmp, cache_file)  # atomic: concurrent starters never read half a file
    return cfg, tensors
