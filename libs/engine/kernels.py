"""Matrix-product kernels for the weight formats, and the measurement that picks between them.

Which format is fastest depends on the CPU, not on the model: with AVX-512 BF16, bf16 products
run 4-5x faster than fp32 from 8 rows up, while one row (single-stream decode) is bound by how
many weight bytes stream from memory, where int8 wins. On AVX2-only CPUs bf16 is slow. So
`auto` measures the layer shapes once at load instead of trusting a table.

Every kernel here keeps activations in fp32 around the product: elementwise work in bf16 is slow
without native support, and fp32 residuals keep the model close to the reference.

Replays and prefix-cache hits need a prompt row to get the same bits however many rows share its
product. On CPUs with AMX, oneDNN runs bf16 products of more than 32 rows on AMX tiles, and a
row's bits then depend on the row count; at 32 rows or fewer every row gets the bits it gets
alone. `measure` checks this on the running CPU, and `linear` then multiplies prompt rows at
most `slice_rows` at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class DualWeight:
    """An int8 copy (few rows) and a bf16 copy (many rows) of one matrix; see `linear`."""

    full: torch.Tensor
    q: torch.Tensor
    scale: torch.Tensor


Weight = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | DualWeight


def int8_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, keep: bool = False) -> torch.Tensor:
    # The int8 kernel is only fast with bf16 activations.
    y = torch._weight_int8pack_mm(x.to(torch.bfloat16), q, scale)
    return y if keep else y.to(x.dtype)


def dense_mm(x: torch.Tensor, w: torch.Tensor, keep: bool = False) -> torch.Tensor:
    if w.dtype == x.dtype:
        return F.linear(x, w)
    y = F.linear(x.to(w.dtype), w)
    return y if keep else y.to(x.dtype)


def linear(
    x: torch.Tensor,
    w: Weight,
    small: bool,
    keep: bool = False,
    slice_rows: int | None = None,
    free_rows: int = 0,
) -> torch.Tensor:
    """x @ w.T. `small` picks the int8 copy of a DualWeight (see LlamaModel.forward).

    The result has x's dtype, or with `keep` the kernel's own (bf16 for bf16 and int8 weights),
    which saves two casts where the next op is another product or an add into the fp32 residual.
    With `slice_rows` (from `measure`), rows past the first `free_rows` (generated tokens, whose
    bits nothing relies on) are multiplied at most that many at a time, so each gets its bits
    alone; the free rows may share one larger, faster product.
    """
    rows = x.shape[0]
    if small or slice_rows is None or rows <= slice_rows:
        return _product(x, w, small, keep)
    start = free_rows if free_rows > slice_rows else 0
    parts = [_product(x[:start], w, small, keep)] if start else []
    parts += [_product(x[a : a + slice_rows], w, small, keep) for a in range(start, rows, slice_rows)]
    return torch.cat(parts)


def _product(x: torch.Tensor, w: Weight, small: bool, keep: bool) -> torch.Tensor:
    if isinstance(w, DualWeight):
        return int8_mm(x, w.q, w.scale, keep) if small else dense_mm(x, w.full, keep)
    if isinstance(w, tuple):
        return int8_mm(x, w[0], w[1], keep)
    return dense_mm(x, w, keep)


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-row int8, the layout torch._weight_int8pack_mm expects."""
    scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), scale.to(torch.bfloat16).contiguous()


@dataclass
class Calibration:
    """What `measure` found: the formats' times for one (rows x hidden) @ (hidden x 2*inter)."""

    us: dict[str, dict[int, float]]  # format -> rows -> best microseconds
    int8_max_rows: int  # up to this many rows int8 beats bf16
    # bf16 products give a row the same bits at any row count up to this many (None: at any
    # count); see invariant_rows.
    slice_rows: int | None = None

    def best_dtype(self) -> str:
        """'hybrid' when bf16 is the fastest batched kernel here, else 'int8' (AVX2 CPUs)."""
        big = max(self.us["bf16"])
        return "hybrid" if self.us["bf16"][big] < min(self.us["int8"][big], self.us["fp32"][big]) else "int8"


def measure(
    hidden: int = 576, out: int = 3072, rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32), reps: int = 5
) -> Calibration:
    """Time the three kernels on a layer-sized product (about 0.3 s on a 2-core box)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(out, hidden, generator=g) * 0.02
    wb = w.to(torch.bfloat16)
    q, s = quantize_int8(w)
    fns = {
        "fp32": lambda x: dense_mm(x, w),
        "bf16": lambda x: dense_mm(x, wb),
        "int8": lambda x: int8_mm(x, q, s),
    }
    us: dict[str, dict[int, float]] = {k: {} for k in fns}
    with torch.inference_mode():
        for r in rows:
            x = torch.randn(r, hidden, generator=g)
            # Interleaved so that a burst of load from elsewhere hits every format alike.
            for _ in range(reps):
                for name, f in fns.items():
                    t = time.perf_counter()
                    f(x)
                    el = (time.perf_counter() - t) * 1e6
                    us[name][r] = min(us[name].get(r, el), el)
    int8_max = 0
    for r in rows:
        if us["int8"][r] <= us["bf16"][r]:
            int8_max = r
        else:
            break
    return Calibration(us, int8_max, invariant_rows(wb, g))


def invariant_rows(w: torch.Tensor, g: torch.Generator, limit: int = 32) -> int | None:
    """None when a bf16 product gives every row the bits it gets alone at any tested row count,
    else `limit` when every count up to it does, else 1 (one row a time: slow, but exact)."""
    x = torch.randn(300, w.shape[1], generator=g)
    with torch.inference_mode():
        alone = torch.cat([dense_mm(x[i : i + 1], w) for i in range(limit + 1)])

        def same(n: int) -> bool:
            return torch.equal(dense_mm(x[:n], w)[: limit + 1], alone[:n])

        if all(same(n) for n in (33, 64, 128, 300)):
            return None
        return limit if all(same(n) for n in range(2, limit + 1)) else 1
