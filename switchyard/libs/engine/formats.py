"""The GGUF's storage formats, each one object: which tensors it stores beside the dequantized
matrix, how it makes them from the file's blocks, and which native product multiplies them.

`read_gguf` asks `format_of(type name)` and never branches on the type itself, so reading a new
format is one class here (and, where no existing layout can hold its blocks, one kernel in
native/block_matmul.cpp). Every stored form is one of two kinds of block the native kernels take
(kernels.BlockWeight): 4-bit (`.q4` values 0..15 and `.q4dm` per block of 32 (d, m), w = d * q + m)
or 8-bit (`.q8` int8 and `.q8d` per block of 32 d, w = d * q).

Exact where the format's values fit one of the two (`exact`): Q4_0, Q4_1 and Q8_0 are those blocks;
Q5_0's values (q - 16 in -16..15, one fp16 scale per 32) are 8-bit blocks; Q4_K's sub-blocks of 32
(6-bit scale and minimum times the super-block's fp16 d and dmin) are 4-bit blocks with fp32 d and
m. Q6_K's sub-blocks are 16 wide, two scales per block of 32, and q * scale does not fit int8, so
it is requantized to 8-bit blocks with fp16 scales (about one 254th of each block's largest weight
added as rounding error; 9 matrices of Gemma 3 270M, tests/engine/test_formats.py measures it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

QK_K = 256  # a K-quant super-block's width


def _fp16(raw: np.ndarray) -> np.ndarray:
    """Two bytes per row of `raw` [..., 2] as fp16, widened to fp32 (exactly)."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


class GgufFormat:
    """A GGUF tensor type as the engine stores it. `stored`: the suffixes of the tensors `blocks`
    returns (none: only the dequantized matrix is kept, for convert to cast); `layout`: the native
    product (kernels.LAYOUTS) its blocks are packed for, before interleaving; `exact`: whether the
    blocks dequantize to the file's values bit for bit."""

    names: ClassVar[tuple[str, ...]] = ()
    stored: ClassVar[tuple[str, ...]] = ()
    layout: ClassVar[str | None] = None
    exact: ClassVar[bool] = True

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        """The stored tensors of a matrix: `data` its raw bytes [rows, bytes per row] as gguf
        reads them, `dense` the same matrix dequantized by gguf [rows, cols] fp32."""
        return {}


class Dense(GgufFormat):
    names = ("F32", "F16", "BF16")


class Q4Blocks(GgufFormat):
    """Q4_0 (w = d * (q - 8)) and Q4_1 (w = d * q + m): ggml's block is an fp16 scale (and, for
    Q4_1, an fp16 minimum) followed by 16 bytes whose low nibbles are the block's first 16 values
    and high nibbles its last 16."""

    names = ("Q4_0", "Q4_1")
    stored = (".q4", ".q4dm")
    layout = "q4"

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        rows = data.shape[0]
        head = data.shape[1] // (dense.shape[1] // 32) - 16  # 2 bytes (Q4_0) or 4 (Q4_1)
        b = data.reshape(rows, -1, head + 16)
        d = _fp16(b[..., 0:2])
        m = _fp16(b[..., 2:4]) if head == 4 else -8.0 * d
        qs = b[..., head:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1).reshape(rows, -1)
        return {".q4": np.ascontiguousarray(q, dtype=np.uint8), ".q4dm": np.stack([d, m], axis=-1)}


class Q8Blocks(GgufFormat):
    """Q8_0: an fp16 scale followed by 32 int8 values."""

    names = ("Q8_0",)
    stored = (".q8", ".q8d")
    layout = "q8"

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        rows = data.shape[0]
        b = data.reshape(rows, -1, 34)
        q = np.ascontiguousarray(b[..., 2:]).view(np.int8).reshape(rows, -1)
        return {".q8": q, ".q8d": _fp16(b[..., 0:2])}


class Q5_0(GgufFormat):
    """An fp16 scale, 4 bytes of fifth bits, 16 bytes of nibbles: w = d * (q - 16). The values
    q - 16 are int8, so the blocks are Q8_0's with the same scale; recovered here from gguf's own
    dequantization (d * v is exact in fp32 for an fp16 d and |v| <= 16, so w / d is v)."""

    names = ("Q5_0",)
    stored = (".q8", ".q8d")
    layout = "q8"

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        rows = data.shape[0]
        d = _fp16(data.reshape(rows, -1, 22)[..., 0:2])
        w = dense.reshape(rows, -1, 32)
        safe = np.where(d == 0, 1.0, d)[..., None]
        q = np.where(d[..., None] == 0, 0, np.rint(w / safe)).astype(np.int8)
        return {".q8": q.reshape(rows, -1), ".q8d": d}


class Q4_K(GgufFormat):
    """Super-blocks of 256: fp16 d and dmin, 12 bytes of 6-bit scales and minimums for its 8
    sub-blocks of 32, then 128 bytes of nibbles (bytes 32j..32j+31: sub-block 2j in the low
    nibbles, 2j+1 in the high). w = (d * sc) * q - dmin * m: a 4-bit block with fp32 d = d * sc
    and m = -(dmin * m), both exact products."""

    names = ("Q4_K",)
    stored = (".q4", ".q4dm")
    layout = "q4"

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        from gguf.quants import Q4_K as GgufQ4K

        rows = data.shape[0]
        b = data.reshape(-1, 144)
        d, dmin = _fp16(b[:, 0:2]), _fp16(b[:, 2:4])
        sc, mn = GgufQ4K.get_scale_min(np.ascontiguousarray(b[:, 4:16]))
        qs = b[:, 16:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
        q = (qs & 0xF).reshape(rows, -1)
        dsub = (d[:, None] * sc.astype(np.float32)).reshape(rows, -1)
        msub = -(dmin[:, None] * mn.astype(np.float32)).reshape(rows, -1)
        return {".q4": np.ascontiguousarray(q, dtype=np.uint8), ".q4dm": np.stack([dsub, msub], axis=-1)}


class Q6_K(GgufFormat):
    """Super-blocks of 256 in 16 sub-blocks of 16, each with an int8 scale: requantized from gguf's
    dequantization to Q8_0-style blocks whose scale (the block's largest |w| / 127) is rounded to
    fp16, so the interleaved 8-bit layout takes them. Not exact (see the module's docstring)."""

    names = ("Q6_K",)
    stored = (".q8", ".q8d")
    layout = "q8"
    exact = False

    def blocks(self, data: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        rows = dense.shape[0]
        w = dense.reshape(rows, -1, 32)
        d = (np.abs(w).max(-1) / 127.0).astype(np.float16).astype(np.float32)
        safe = np.where(d == 0, 1.0, d)[..., None]
        q = np.clip(np.rint(w / safe), -127, 127).astype(np.int8)
        return {".q8": q.reshape(rows, -1), ".q8d": d}


FORMATS: dict[str, GgufFormat] = {
    name: fmt() for fmt in (Dense, Q4Blocks, Q8Blocks, Q5_0, Q4_K, Q6_K) for name in fmt.names
}


# The suffixes of every block tensor a matrix may keep beside its dequantized values, one tuple per
# kind of block (4-bit, 8-bit), in the order (values, scales...): what weights.convert sets aside
# and kernels.pack_blocks reads.
Q4_STORED = Q4Blocks.stored
Q8_STORED = Q8Blocks.stored
BLOCK_SUFFIXES = tuple(dict.fromkeys(s for fmt in FORMATS.values() for s in fmt.stored))


def format_of(type_name: str) -> GgufFormat:
    """The format object of a GGUF tensor type; ValueError for one the engine cannot serve."""
    try:
        return FORMATS[type_name]
    except KeyError:
        raise ValueError(f"GGUF tensor type {type_name} is not supported by the native engine") from None
