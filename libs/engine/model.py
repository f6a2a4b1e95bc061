"""A Llama decoder in plain PyTorch whose attention reads and writes a paged KV cache.

One forward pass serves a whole engine step: the tokens of all scheduled sequences are
flattened into one [T] batch (varlen), so every matmul is shared across sequences; only
attention is split, into one padded call for all single-token decodes and one call per
prefill chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from libs.engine.weights import LlamaConfig


@dataclass
class PrefillSpan:
    row_start: int  # first row of this chunk in the flattened batch
    q_len: int
    start_pos: int  # position of the chunk's first token == tokens already in the cache
    ctx_slots: torch.Tensor  # [start_pos + q_len] cache slots of every key the chunk attends to


@dataclass
class AttnBatch:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slot_mapping: torch.Tensor  # [T] where each token's K/V is written
    decode_rows: torch.Tensor | None  # [Bd] rows that are single-token decodes
    decode_slots: torch.Tensor | None  # [Bd, Lmax] padded key slots per decode
    decode_mask: torch.Tensor | None  # [Bd, 1, 1, Lmax] True where the key is real
    prefills: list[PrefillSpan]
    logits_rows: torch.Tensor  # [S] rows whose next-token logits are wanted


class KVCache:
    """Flat slot-addressed K/V storage: slot = block_id * block_size + offset."""

    def __init__(self, cfg: LlamaConfig, num_blocks: int, block_size: int, dtype: torch.dtype) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (cfg.num_layers, num_blocks * block_size, cfg.num_kv_heads, cfg.head_dim)
        # zeros, not empty: padded attention reads unwritten slots (masked out), and masking
        # cannot neutralise a NaN that uninitialised memory may hold.
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)

    @staticmethod
    def bytes_per_block(cfg: LlamaConfig, block_size: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * elem


@dataclass
class DualWeight:
    """fp32 and int8 copies of one matrix; see weights.convert('hybrid')."""

    full: torch.Tensor
    q: torch.Tensor
    scale: torch.Tensor


Weight = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | DualWeight

# Up to this many rows the int8 kernel beats fp32 here (bench/engine_bench.py, mm sweep).
INT8_MAX_ROWS = 16


def linear(x: torch.Tensor, w: Weight) -> torch.Tensor:
    if isinstance(w, DualWeight):
        if x.shape[0] <= INT8_MAX_ROWS:
            return torch._weight_int8pack_mm(x.to(torch.bfloat16), w.q, w.scale).to(x.dtype)
        return F.linear(x, w.full)
    if isinstance(w, tuple):
        # The int8 kernel is only fast with bf16 activations; everything around it stays fp32.
        return torch._weight_int8pack_mm(x.to(torch.bfloat16), w[0], w[1]).to(x.dtype)
    return F.linear(x, w)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # Same order of operations as transformers' LlamaRMSNorm so fp32 outputs agree exactly.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass
class Layer:
    attn_norm: torch.Tensor
    qkv: Weight
    o: Weight
    ffn_norm: torch.Tensor
    gate_up: Weight
    down: Weight


class LlamaModel:
    def __init__(self, cfg: LlamaConfig, tensors: dict[str, torch.Tensor], dtype: str) -> None:
        self.cfg = cfg
        self.dtype_name = dtype
        self.compute_dtype = tensors["token_embd.weight"].dtype
        self.embed = tensors["token_embd.weight"]
        self.norm = tensors["output_norm.weight"]
        self.lm_head = self._weight(tensors, "output.weight", fallback="token_embd.weight")
        self.layers: list[Layer] = []
        for i in range(cfg.num_layers):
            p = f"blk.{i}."
            self.layers.append(
                Layer(
                    attn_norm=tensors[p + "attn_norm.weight"],
                    qkv=self._fuse(tensors, [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]),
                    o=self._weight(tensors, p + "attn_output.weight"),
                    ffn_norm=tensors[p + "ffn_norm.weight"],
                    gate_up=self._fuse(tensors, [p + "ffn_gate.weight", p + "ffn_up.weight"]),
                    down=self._weight(tensors, p + "ffn_down.weight"),
                )
            )
        inv_freq = 1.0 / (
            cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim)
        )
        pos = torch.arange(cfg.max_position, dtype=torch.float32)
        freqs = torch.outer(pos, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(self.compute_dtype)
        self.sin = emb.sin().to(self.compute_dtype)

    @staticmethod
    def _weight(t: dict[str, torch.Tensor], name: str, fallback: str | None = None) -> Weight:
        if name + ".q" in t and name in t:
            return DualWeight(t[name], t[name + ".q"], t[name + ".scale"])
        if name + ".q" in t:
            return (t[name + ".q"], t[name + ".scale"])
        if name in t:
            return t[name]
        assert fallback is not None, name
        return t[fallback]

    @classmethod
    def _fuse(cls, t: dict[str, torch.Tensor], names: list[str]) -> Weight:
        # One matmul instead of several: fewer kernel launches per layer on a small model.
        parts = [cls._weight(t, n) for n in names]
        if isinstance(parts[0], DualWeight):
            duals = [p for p in parts if isinstance(p, DualWeight)]
            return DualWeight(
                torch.cat([p.full for p in duals]).contiguous(),
                torch.cat([p.q for p in duals]).contiguous(),
                torch.cat([p.scale for p in duals]).contiguous(),
            )
        if isinstance(parts[0], tuple):
            return (
                torch.cat([p[0] for p in parts if isinstance(p, tuple)]).contiguous(),
                torch.cat([p[1] for p in parts if isinstance(p, tuple)]).contiguous(),
            )
        return torch.cat([p for p in parts if isinstance(p, torch.Tensor)]).contiguous()

    @torch.inference_mode()
    def forward(self, batch: AttnBatch, kv: KVCache) -> torch.Tensor:
        """Run all scheduled tokens; returns fp32 logits for batch.logits_rows."""
        cfg = self.cfg
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        x = self.embed[batch.input_ids]
        cos = self.cos[batch.positions].unsqueeze(1)
        sin = self.sin[batch.positions].unsqueeze(1)
        T = x.shape[0]
        for li, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm, cfg.rms_eps)
            qkv = linear(h, layer.qkv)
            q = qkv[:, : nh * hd].view(T, nh, hd)
            k = qkv[:, nh * hd : (nh + nkv) * hd].view(T, nkv, hd)
            v = qkv[:, (nh + nkv) * hd :].view(T, nkv, hd)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            kc, vc = kv.k[li], kv.v[li]
            kc.index_copy_(0, batch.slot_mapping, k)
            vc.index_copy_(0, batch.slot_mapping, v)
            attn = self._attention(q, k, v, kc, vc, batch)
            x = x + linear(attn.reshape(T, nh * hd), layer.o)
            h = rms_norm(x, layer.ffn_norm, cfg.rms_eps)
            gu = linear(h, layer.gate_up)
            inter = cfg.intermediate_size
            x = x + linear(F.silu(gu[:, :inter]) * gu[:, inter:], layer.down)
        x = rms_norm(x[batch.logits_rows], self.norm, cfg.rms_eps)
        return linear(x, self.lm_head).float()

    def _attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
        batch: AttnBatch,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        if batch.decode_rows is not None:
            assert batch.decode_slots is not None and batch.decode_mask is not None
            qd = q[batch.decode_rows].unsqueeze(2)  # [Bd, nh, 1, hd]
            kd = kc[batch.decode_slots].transpose(1, 2)  # [Bd, nkv, L, hd]
            vd = vc[batch.decode_slots].transpose(1, 2)
            od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=batch.decode_mask, enable_gqa=True)
            out[batch.decode_rows] = od.squeeze(2)
        for span in batch.prefills:
            rows = slice(span.row_start, span.row_start + span.q_len)
            qp = q[rows].transpose(0, 1).unsqueeze(0)  # [1, nh, q, hd]
            if span.start_pos == 0:
                # Nothing cached before this chunk: its own K/V are the whole context.
                kp = k[rows].transpose(0, 1).unsqueeze(0)
                vp = v[rows].transpose(0, 1).unsqueeze(0)
                op = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True)
            else:
                kp = kc[span.ctx_slots].transpose(0, 1).unsqueeze(0)
                vp = vc[span.ctx_slots].transpose(0, 1).unsqueeze(0)
                qpos = torch.arange(span.q_len).unsqueeze(1) + span.start_pos
                mask = torch.arange(span.start_pos + span.q_len).unsqueeze(0) <= qpos
                op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=True)
            out[rows] = op.squeeze(0).transpose(0, 1)
        return out
