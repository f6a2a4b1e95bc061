"""The layers every definition is made of: RMSNorm, RoPE tables (plain, or with per-frequency
factors such as Llama 3's scaling), per-head QK-norm and the gated MLP's activations. The attention
over the paged cache is model.DecoderModel's (it owns the cache views of a step)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # One fused op; on fp32 it gives the same values as transformers' LlamaRMSNorm.
    return F.rms_norm(x, w.shape, w, eps)


def rope_tables(
    theta: float, head_dim: int, positions: int, dtype: torch.dtype, factors: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [positions, head_dim] of rotate-half RoPE with base `theta`; `factors`
    [head_dim / 2] divide each frequency (llama.cpp's `rope_freqs.weight`: Llama 3's scaling)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if factors is not None:
        inv_freq = inv_freq / factors.float()
    freqs = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    # rotate_half(x) * sin == x.roll(half) * sin_signed: one roll instead of slices, neg and cat.
    sin = emb.sin()
    half = head_dim // 2
    return emb.cos().to(dtype), torch.cat((-sin[:, :half], sin[:, half:]), dim=-1).to(dtype)


def llama3_rope_factors(theta: float, head_dim: int, scaling: dict[str, Any]) -> torch.Tensor:
    """The per-frequency divisors of Llama 3's RoPE scaling (what llama.cpp's converter stores as
    `rope_freqs.weight`): 1 for short wavelengths, `factor` for long ones, a smooth blend between."""
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    old = float(scaling.get("original_max_position_embeddings", 8192))
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def qk_norm(
    qkv: torch.Tensor, q_w: torch.Tensor, k_w: torch.Tensor, nh: int, nkv: int, hd: int, eps: float, norm: Callable
) -> torch.Tensor:
    """qkv with each q head and each k head RMS-normed over head_dim (Qwen 3's and Gemma 3's QK-norm)."""
    T, nq, nk = qkv.shape[0], nh * hd, nkv * hd
    q = norm(qkv[:, :nq].reshape(-1, hd).float().contiguous(), q_w, eps).view(T, nq)
    k = norm(qkv[:, nq : nq + nk].reshape(-1, hd).float().contiguous(), k_w, eps).view(T, nk)
    return torch.cat([q, k, qkv[:, nq + nk :].float()], dim=1)


def silu_gate(gu: torch.Tensor, inter: int) -> torch.Tensor:
    return F.silu(gu[:, :inter]) * gu[:, inter:]


def gelu_tanh_gate(gu: torch.Tensor, inter: int) -> torch.Tensor:
    # GeGLU with gelu's tanh form (ggml_gelu, HF's gelu_pytorch_tanh), in fp32 as llama.cpp.
    return F.gelu(gu[:, :inter].float(), approximate="tanh") * gu[:, inter:].float()


# The gated MLP's activation by config name: act(gate) * up over the stacked [gate; up] product.
ACTIVATIONS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {"silu": silu_gate, "gelu_tanh": gelu_tanh_gate}
