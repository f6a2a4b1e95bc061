"""The engine's own CPU kernels (C++, `block_matmul.cpp`), compiled on first use and cached.

torch's int8/int4 weight-only CPU kernels convert weights to fp32 on CPUs without AVX-512, and
are compute-bound there. These kernels multiply the GGUF's weight blocks by activations quantized
per row in blocks of 32 to int8, with integer dot products (AVX2 `maddubs`, or AVX-512 VNNI
`dpbusd` where the CPU has it: the same integers, so the same bits), as llama.cpp does. On CPUs
with AMX-INT8, products of 12 rows or more of the interleaved layouts (q4x8, q8x8) run on the tiles (`block_amx.inc`):
the same integers again, and the same float epilogue, so a row's bits never depend on which kernel
its batch took.

The library is built with `torch.utils.cpp_extension.load` (g++ and ninja from the distribution,
no pip build step) into a directory keyed by the source's hash under the user's cache
(~/.cache/switchyard/kernels), and registers torch ops under
`torch.ops.switchyard`. `available()` says whether they can run here: a compiler, an x86 CPU
with AVX2/FMA/F16C. A failed build is remembered for the process and logged once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import threading
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("block_matmul.cpp")
# The layer's other parts (RMSNorm, rotary embedding and cache write, decode attention, SiLU).
LAYER_OPS = Path(__file__).with_name("layer_ops.cpp")
# Included by SOURCE once per instruction set, and the helpers both sources include; part of the
# build's key.
ROWS = Path(__file__).with_name("block_rows.inc")
AMX = Path(__file__).with_name("block_amx.inc")
SIMD = Path(__file__).with_name("simd.h")
# A decoder's layers for an all-decode step in one call, over the ops above (declared in OPS).
DECODE_STACK = Path(__file__).with_name("decode_stack.cpp")
OPS = Path(__file__).with_name("ops.h")
_lock = threading.Lock()
_state: dict[str, bool | str] = {}


def build_dir() -> Path:
    return Path.home() / ".cache" / "switchyard" / "kernels"


def _key() -> str:
    h = hashlib.sha256(b"".join(p.read_bytes() for p in (SOURCE, ROWS, AMX, LAYER_OPS, SIMD, DECODE_STACK, OPS)))
    h.update(torch.__version__.encode())
    # torch's build file names the sources by path: two checkouts sharing one folder would each find the
    # other's paths there and rebuild on every load.
    h.update(str(SOURCE.parent.resolve()).encode())
    return h.hexdigest()[:16]


def load() -> bool:
    """Compile (once per source version) and register the ops; False where they cannot run."""
    with _lock:
        if "ok" in _state:
            return bool(_state["ok"])
        ok = False
        try:
            ok = _load()
        except Exception as exc:  # no compiler, no ninja, a build error: the torch kernels serve
            lines = str(exc).strip().splitlines()
            _state["error"] = lines[-1] if lines else type(exc).__name__
            log.warning("native kernels unavailable: %s", _state["error"])
        _state["ok"] = ok
        return ok


def _load() -> bool:
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        _state["error"] = f"no kernels for {platform.machine()}"
        return False
    if not hasattr(torch.ops.switchyard, "has_avx2"):
        from torch.utils import cpp_extension

        key = _key()
        out = build_dir() / key
        out.mkdir(parents=True, exist_ok=True)
        # torch's own build lock is a file that only a finished build removes: one killed mid-build
        # (a stopped stack, a timed-out test) would leave every later engine waiting on it forever.
        # A kernel lock ends with its holder; whoever holds it knows a torch lock still there is stale.
        with open(out / "build.flock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            (out / "lock").unlink(missing_ok=True)
            cpp_extension.load(
                name=f"switchyard_kernels_{key}",
                sources=[str(SOURCE), str(LAYER_OPS), str(DECODE_STACK)],
                build_directory=str(out),
                # No global -mavx2: the AVX2 functions carry target attributes, so the library loads
                # on any x86 CPU and has_avx2() decides. No contraction of separate multiply-adds:
                # a row's bits must not depend on how the compiler scheduled its template.
                extra_cflags=["-O3", "-fopenmp", "-ffp-contract=off"],
                extra_ldflags=["-fopenmp"],
                is_python_module=False,
                verbose=False,
            )
    if not torch.ops.switchyard.has_avx2():
        _state["error"] = "the CPU lacks AVX2/FMA/F16C"
        return False
    return True


def available() -> bool:
    return load()


def unavailable_reason() -> str:
    load()
    return str(_state.get("error", ""))


def has_vnni() -> bool:
    """Whether the CPU has AVX-512 VNNI, where the products use `dpbusd` (same bits as AVX2's)."""
    return bool(_ops().has_vnni())


def use_vnni(on: bool) -> bool:
    """Turns the VNNI kernels on or off (only on where the CPU has them); whether they are on."""
    return bool(_ops().use_vnni(on))


def vnni_on() -> bool:
    """Whether the products take the VNNI kernels now."""
    return bool(_ops().vnni_on())


def has_amx() -> bool:
    """Whether the CPU has AMX-INT8 tiles (and Linux granted them), where interleaved products of
    12 rows or more take them (block_amx.inc; the same bits as the VNNI kernels)."""
    return bool(_ops().has_amx())


def use_amx(on: bool) -> bool:
    """Turns the AMX kernel on or off (only on where the CPU has it); whether it is on. It serves
    only while the VNNI kernels do (`amx_on`)."""
    return bool(_ops().use_amx(on))


def amx_on() -> bool:
    """Whether products of several rows take the AMX tiles now."""
    return bool(_ops().amx_on())


ISAS = ("auto", "avx512", "avx2")


def select_isa(isa: str) -> None:
    """'auto': the best kernels the CPU has; 'avx512': no AMX tiles (the AVX-512 VNNI class);
    'avx2': no AVX-512 VNNI either (the AVX2 class). Each gives the same bits at its class's speed.
    Process-wide, as the kernels' dispatch is. ValueError for another name."""
    if isa not in ISAS:
        raise ValueError(f"unknown kernel_isa {isa!r}: one of {', '.join(ISAS)}")
    # 'auto' is what a freshly loaded library does: the kernels are built (about 30 s the first
    # time) only for an engine that asks for less, or once some other user has loaded them.
    if (isa != "auto" or _state.get("ok")) and available():
        use_vnni(isa != "avx2")
        use_amx(isa == "auto")


def _ops() -> Any:
    if not _state.get("ok") and not load():
        raise RuntimeError(f"native kernels unavailable: {unavailable_reason()}")
    return torch.ops.switchyard


def q4_matmul(x: torch.Tensor, packed: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ W.T with W in 4-bit blocks (see pack_q4); fp32 [M, N]."""
    return _ops().q4_matmul(x, packed, d, m)  # type: ignore[no-any-return]


def q4x8_matmul(x: torch.Tensor, packed: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ W.T with W's 4-bit blocks interleaved by 8 columns (see pack_q4x8); fp32 [M, N]."""
    return _ops().q4x8_matmul(x, packed, d, m)  # type: ignore[no-any-return]


def q8_matmul(x: torch.Tensor, qs: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ W.T with W in Q8_0 blocks: int8 [N, K] values, fp32 [N, K/32] scales."""
    return _ops().q8_matmul(x, qs, d)  # type: ignore[no-any-return]


def q8x8_matmul(x: torch.Tensor, packed: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ W.T with W's 8-bit blocks interleaved by 8 columns (see pack_q8x8); fp32 [M, N]."""
    return _ops().q8x8_matmul(x, packed, d)  # type: ignore[no-any-return]


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The activations' quantization alone: int8 values, per-block scales and scaled sums."""
    q, d, s = _ops().quantize_rows(x)
    return q, d, s


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x [M, D] (fp32) with weight w [D]."""
    return _ops().rms_norm(x, w, eps)  # type: ignore[no-any-return]


def rope_store(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    kc: torch.Tensor,
    vc: torch.Tensor,
    slots: torch.Tensor,
    nh: int,
    nkv: int,
) -> None:
    """In place: rotary embedding of qkv's q and k heads (rotate-half, `sin` signed), then each row's
    k and v heads written to its slot of the caches kc, vc [nkv, slots, hd] (fp32, or fp16: then the
    k and v left in qkv are the stored, rounded values)."""
    _ops().rope_store(qkv, cos, sin, positions, kc, vc, slots, nh, nkv)


def decode_attention(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, lens: torch.Tensor
) -> torch.Tensor:
    """Single-token attention of q [B, heads, hd] over the keys at slots[b, :lens[b]] of the caches
    [kv_heads, slots, hd] (fp32 or fp16), read in place; [B, heads, hd]."""
    return _ops().decode_attention(q, kc, vc, slots, lens)  # type: ignore[no-any-return]


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gu = [gate | up] of shape [T, 2I]; [T, I]."""
    return _ops().silu_mul(gu)  # type: ignore[no-any-return]


def decode_stack(nh: int, nkv: int, hd: int, eps: float) -> Any:
    """An empty DecodeStack (decode_stack.cpp): `add_layer(attn_norm, ffn_norm, [values, d, m] x 4,
    [kind] x 4)` per layer (kind 0: q4x8, 1: q4, 2: q8, whose m is an empty tensor), then
    `run(x, cos, sin, positions, kc, vc, slots, decode_slots, lens)` for each all-decode step
    (kind 3: q8x8, m empty too)."""
    _ops()
    return torch.classes.switchyard.DecodeStack(nh, nkv, hd, eps)


def pack_q4(q: torch.Tensor) -> torch.Tensor:
    """[N, K] 4-bit values (uint8 0..15) -> [N, K/2] bytes in ggml's block order: per block of 32,
    byte j holds value j in its low nibble and value 16 + j in its high one."""
    n, k = q.shape
    blocks = q.reshape(n, k // 32, 2, 16).to(torch.uint8)
    return (blocks[:, :, 0] | (blocks[:, :, 1] << 4)).reshape(n, k // 2).contiguous()


def pack_q4x8(q: torch.Tensor, dm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, K] 4-bit values and [N, K/32, 2] (d, m) -> the q4x8 layout (block_matmul.cpp): bytes
    [N/8, K/32, 128] and d, m [N/8, K/32, 8] in fp16, as the GGUF stores them (a fifth fewer bytes
    to stream per product than fp32 scales). N must be a multiple of 8; ValueError where a scale
    is not an fp16 value (blocks that did not come from a GGUF file)."""
    n, k = q.shape
    nb = k // 32
    if not torch.equal(dm.float().half().float(), dm.float()):
        raise ValueError("q4x8 keeps fp16 scales: these are not fp16 values")
    # [group, column, block, half (values 0-15 / 16-31), register j, byte i]
    v = q.reshape(n // 8, 8, nb, 2, 4, 4).to(torch.uint8)
    packed = (v[:, :, :, 0] | (v[:, :, :, 1] << 4)).permute(0, 2, 3, 1, 4).reshape(n // 8, nb, 128)
    scales = dm.half().reshape(n // 8, 8, nb, 2).permute(0, 2, 1, 3)
    return packed.contiguous(), scales[..., 0].contiguous(), scales[..., 1].contiguous()


def pack_q8x8(qs: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] int8 Q8_0 values and [N, K/32] scales -> the q8x8 layout (block_matmul.cpp): values
    [N/8, K/32, 256] int8, interleaved by 8 columns as q4x8's (register j: values 4j..4j+3 of each
    column), and d [N/8, K/32, 8] fp16. N must be a multiple of 8; ValueError where a scale is not
    an fp16 value."""
    n, k = qs.shape
    nb = k // 32
    if not torch.equal(d.float().half().float(), d.float()):
        raise ValueError("q8x8 keeps fp16 scales: these are not fp16 values")
    # [group, column, block, register j, byte i] -> [group, block, j, column, i]
    v = qs.reshape(n // 8, 8, nb, 8, 4).permute(0, 2, 3, 1, 4).reshape(n // 8, nb, 256)
    scales = d.half().reshape(n // 8, 8, nb).permute(0, 2, 1)
    return v.contiguous(), scales.contiguous()
