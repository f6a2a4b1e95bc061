"""The decoder every model definition (models/) runs, in plain PyTorch and the native ops, whose
attention reads and writes a paged KV cache. What differs between families is in the config and
the tensors a definition reads (QKV biases, QK-norm, post-norms, the activation, windows, RoPE
factors): the forward pass asks for those, never for an architecture's name.

One forward pass serves a whole engine step: the tokens of all scheduled sequences are
flattened into one [T] batch (varlen), so every matmul is shared across sequences; only
attention is split, into one padded call for all single-token decodes and one call per
prefill chunk.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from switchyard.libs.engine import native
from switchyard.libs.engine.kernels import (
    INT8_STORED,
    BlockWeight,
    DualWeight,
    Int4Weight,
    Int8Weight,
    RowInvariance,
    Weight,
    linear,
    pack_blocks,
    pack_dense,
    pack_int4,
    stored_forms,
)
from switchyard.libs.engine.models import ModelConfig
from switchyard.libs.engine.models.layers import ACTIVATIONS, qk_norm, rms_norm, rope_tables
from switchyard.libs.engine.weights import FUSED, stack_parts

LlamaConfig = ModelConfig  # the name earlier callers import

# Prompt rows' attention runs in calls of QUERY_SLICE query rows, the last one padded with zero
# rows to at least MIN_QUERY_ROWS, over keys padded with masked zeros to a multiple of KEY_BLOCK.
# fp32 SDPA multiplies each block of up to 32 query rows as one product, and a block of only a
# few rows takes another path; its probabilities-times-values product sums the keys in an order
# that depends on how many there are. Both were measured to change a row's bits; with the
# padding a row gets the same bits whether its prompt arrived whole, in chunks, or mostly from
# the cache (tests/engine/test_kernels.py).
QUERY_SLICE = 32
MIN_QUERY_ROWS = 8
KEY_BLOCK = 64


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def prefill_mask(start: int, n: int) -> torch.Tensor:
    """Causal mask of a chunk of n query rows after `start` cached tokens, with the padding rows of
    its last query slice (they see every key, like the last real row) and padding key columns
    up to a multiple of KEY_BLOCK (seen by nobody)."""
    height = max(n, (n - 1) // QUERY_SLICE * QUERY_SLICE + MIN_QUERY_ROWS)
    rows = (torch.arange(height) + start).clamp(max=start + n - 1)
    return torch.arange(_round_up(start + n, KEY_BLOCK)).unsqueeze(0) <= rows.unsqueeze(1)


@dataclass
class PrefillSpan:
    row_start: int  # first row of this chunk in the flattened batch
    q_len: int
    start_pos: int  # position of the chunk's first token == tokens already in the cache
    # [start_pos + q_len] cache slots of every key the chunk attends to (empty when start_pos == 0:
    # the chunk's own K/V are the whole context)
    ctx_slots: torch.Tensor
    # [rows, keys] causal mask (prefill_mask): rows = q_len and the last slice's padding, keys =
    # start_pos + q_len rounded up to KEY_BLOCK
    mask: torch.Tensor


@dataclass
class AttnBatch:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slot_mapping: torch.Tensor  # [T] where each token's K/V is written
    num_decodes: int  # rows [0, num_decodes) are single-token decodes, one per sequence
    decode_slots: torch.Tensor | None  # [num_decodes * Lmax] padded key slots, row after row
    # [1, num_decodes, 1, Lmax] 0 where the key is real, else -inf (None where decode_lens serves: native)
    decode_bias: torch.Tensor | None
    prefills: list[PrefillSpan]
    logits_rows: torch.Tensor  # [S] rows whose next-token logits are wanted
    # Rows [0, free_rows) are generated tokens (the decodes): their products may use any kernel
    # (see linear). A step without prefills is made of generated tokens only.
    free_rows: int = 0
    decode_lens: torch.Tensor | None = None  # [num_decodes] keys each decode attends to

    def to(self, device: torch.device) -> AttnBatch:
        """The same batch with every tensor on `device` (built on the CPU, copied once a step)."""
        if device.type == "cpu":
            return self

        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        spans = [
            PrefillSpan(p.row_start, p.q_len, p.start_pos, p.ctx_slots.to(device), p.mask.to(device))
            for p in self.prefills
        ]
        return AttnBatch(
            self.input_ids.to(device),
            self.positions.to(device),
            self.slot_mapping.to(device),
            self.num_decodes,
            mv(self.decode_slots),
            mv(self.decode_bias),
            spans,
            self.logits_rows.to(device),
            self.free_rows,
            mv(self.decode_lens),
        )


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """Zeros that take memory only where written, on the CPU: an anonymous mapping is the kernel's
    zero page until touched, where torch.zeros writes every byte (and numpy's calloc asks for huge
    pages, 2 MiB a touch). The KV budget is an upper bound, so resident memory follows its use."""
    if device != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    mapping = mmap.mmap(-1, size)
    # Where transparent huge pages are on for every mapping ("always"), each first write would take
    # 2 MiB; a block's keys are 2 KiB pieces spread over every layer and head, so the cache's resident
    # memory would follow the spread, not the use.
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        mapping.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.frombuffer(mapping, dtype=dtype).view(shape)


class KVCache:
    """Slot-addressed K/V storage, [layer, kv_head, slot, head_dim]; slot = block * block_size + offset.

    Heads before slots: gathering a sequence's slots then yields [kv_head, keys, head_dim]
    directly, the layout attention multiplies with, instead of a copy per layer to transpose.
    """

    def __init__(
        self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str = "cpu"
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (cfg.num_layers, cfg.num_kv_heads, num_blocks * block_size, cfg.head_dim)
        # zeros, not empty: padded attention reads unwritten slots (masked out), and masking
        # cannot neutralise a NaN that uninitialised memory may hold.
        self.k = _zeros(shape, dtype, device)
        self.v = _zeros(shape, dtype, device)

    @staticmethod
    def bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * elem


@dataclass
class Layer:
    attn_norm: torch.Tensor
    qkv: Weight
    o: Weight
    ffn_norm: torch.Tensor
    gate_up: Weight
    down: Weight
    # Where a family has them (None: not): per-head RMSNorm of q and k before RoPE (Qwen 3, Gemma 3),
    # RMSNorm of the attention and FFN outputs before each joins the residual (Gemma 3), biases of
    # the stacked q, k, v (Qwen 2); and the layer's window (0: every key), whose RoPE tables are the
    # local base's.
    q_norm: torch.Tensor | None = None
    k_norm: torch.Tensor | None = None
    post_attn_norm: torch.Tensor | None = None
    post_ffn_norm: torch.Tensor | None = None
    window: int = 0
    qkv_bias: torch.Tensor | None = None

    @property
    def plain(self) -> bool:
        """Llama's layer, which decode_stack.cpp runs: nothing but norms, products, RoPE, attention
        over every key and SiLU."""
        extras = (self.q_norm, self.k_norm, self.post_attn_norm, self.post_ffn_norm, self.qkv_bias)
        return all(t is None for t in extras) and not self.window


@dataclass
class Embedding:
    """The embedding table as 8-bit blocks: rows of int8 values [V, D] with fp32 scales [V, D/32],
    or the tied head's interleaved copy (`x8`: kernels.pack_q8x8's [V/8, D/32, 256] values and
    [V/8, D/32, 8] fp16 scales). A looked-up row is dequantized as gguf does (d * q in fp32), so
    the values are the fp32 table's at a quarter of its bytes, or none where the head holds them."""

    q: torch.Tensor
    d: torch.Tensor
    x8: bool = False

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[0]
        if self.x8:
            # value j*4 + i of block b of column c sits at [group, b, j, c, i] (native.pack_q8x8)
            g, c = ids // 8, ids % 8
            blocks = self.q.shape[1]
            vals = self.q.index_select(0, g).view(n, blocks, 8, 8, 4)[torch.arange(n), :, :, c]
            scales = self.d.index_select(0, g)[torch.arange(n), :, c].float()
            return (vals.float().view(n, blocks, 32) * scales.unsqueeze(-1)).view(n, -1)
        rows = self.q.index_select(0, ids).float().view(n, -1, 32)
        return (rows * self.d.index_select(0, ids).unsqueeze(-1)).view(n, -1)

    @property
    def device(self) -> torch.device:
        return self.q.device

    def to(self, device: str) -> Embedding:
        return Embedding(self.q.to(device), self.d.to(device), self.x8)


def windowed(batch: AttnBatch, window: int) -> AttnBatch:
    """`batch` as a sliding-window layer attends: each query sees the `window` keys before it,
    itself included (llama.cpp's LLAMA_SWA_TYPE_STANDARD: key p0 is masked from query p1 where
    p1 - p0 >= window). Decodes get only those keys' slots (the ones before are never read);
    prompt rows keep their keys and get the window in their mask (masked keys add exact zeros,
    so a row's bits do not depend on how many keys lie before its window)."""
    bd = batch.num_decodes
    slots, lens, bias = batch.decode_slots, batch.decode_lens, batch.decode_bias
    if bd and slots is not None:
        width = slots.numel() // bd
        if lens is None:
            assert bias is not None
            lens = (bias.view(bd, width) == 0).sum(-1)
        keep = min(width, window)
        start = (lens - window).clamp(min=0)
        idx = (start.unsqueeze(1) + torch.arange(keep, device=slots.device)).clamp(max=width - 1)
        slots = slots.view(bd, width).gather(1, idx).reshape(-1)
        new_lens = lens.clamp(max=window)
        if bias is not None:
            real = torch.arange(keep, device=slots.device).unsqueeze(0) < new_lens.unsqueeze(1)
            bias = torch.zeros(bd, keep, dtype=bias.dtype, device=bias.device).masked_fill(~real, float("-inf"))
            bias = bias.view(1, bd, 1, keep)
        lens = new_lens if batch.decode_lens is not None else None
    spans = []
    for p in batch.prefills:
        height, keys = p.mask.shape
        rows = (torch.arange(height, device=p.mask.device) + p.start_pos).clamp(max=p.start_pos + p.q_len - 1)
        near = rows.unsqueeze(1) - torch.arange(keys, device=p.mask.device).unsqueeze(0) < window
        spans.append(dataclasses.replace(p, mask=p.mask & near))
    return dataclasses.replace(batch, decode_slots=slots, decode_lens=lens, decode_bias=bias, prefills=spans)


class DecoderModel:
    """A decoder-only transformer of any served family (models.DEFINITIONS), from its config and tensors."""

    def __init__(self, cfg: ModelConfig, tensors: dict[str, torch.Tensor], dtype: str) -> None:
        self.cfg = cfg
        self.dtype_name = dtype
        # Activations and residuals are fp32 whatever the weight format. The KV cache follows
        # the weights: bf16 beside bf16 products (half the bytes to gather, and decode attention
        # runs on bf16 kernels), fp32 beside fp32 (the reference) and int8 (chosen where bf16 is slow).
        self.compute_dtype = torch.float32
        # native: fp16 (the native ops convert rows as they store and read them; half the bytes of
        # fp32, three more mantissa bits than bf16).
        self.kv_dtype = {"bf16": torch.bfloat16, "hybrid": torch.bfloat16, "native": torch.float16}.get(
            dtype, torch.float32
        )
        # Steps of at most this many rows, all decodes, use the quantized copy of hybrid weights
        # (set from kernels.measure by the engine; see forward).
        self.small_max_rows = 4
        # Decode attention on a bf16 cache as fused bf16 SDPA, else upcast fp32 matmuls
        # (measure_decode_attention, by the engine).
        self.fused_decode = True
        # The layer's norms, rotary embedding, cache write, decode attention and SiLU as the native
        # ops (switchyard/libs/engine/native/layer_ops.cpp) beside the native products, on the CPU.
        self.native_layers = dtype == "native"
        # With native_layers, all-decode steps run every layer in one native call (_native_stack).
        self.use_decode_stack = True
        self._stack: tuple[list[Layer], Any] | None = None
        # Row counts at which prompt rows are multiplied (kernels.row_invariance; None: any).
        self.invariance: RowInvariance | None = None
        self.norm = tensors["output_norm.weight"]
        nat = dtype == "native"
        self.lm_head = self._weight(tensors, "output.weight", fallback="token_embd.weight", native=nat)
        self.embed: torch.Tensor | Embedding
        if "token_embd.weight" in tensors:
            self.embed = tensors["token_embd.weight"]
        elif "token_embd.weight.q8" in tensors:
            self.embed = Embedding(tensors["token_embd.weight.q8"], tensors["token_embd.weight.q8d"])
        else:  # tied: the rows are the head's 8-bit blocks (weights.convert)
            head = self.lm_head
            assert isinstance(head, BlockWeight) and head.m is None, "a tied head in 8-bit blocks"
            self.embed = Embedding(head.values, head.d, head.x8)
        self.layers: list[Layer] = []
        for i in range(cfg.num_layers):
            p = f"blk.{i}."
            self.layers.append(
                Layer(
                    attn_norm=tensors[p + "attn_norm.weight"],
                    qkv=self._stacked(tensors, p, "attn_qkv", nat),
                    o=self._weight(tensors, p + "attn_output.weight", native=nat),
                    ffn_norm=tensors[p + "ffn_norm.weight"],
                    gate_up=self._stacked(tensors, p, "ffn_gate_up", nat),
                    down=self._weight(tensors, p + "ffn_down.weight", native=nat),
                    q_norm=tensors.get(p + "attn_q_norm.weight"),
                    k_norm=tensors.get(p + "attn_k_norm.weight"),
                    post_attn_norm=tensors.get(p + "post_attention_norm.weight"),
                    post_ffn_norm=tensors.get(p + "post_ffw_norm.weight"),
                    window=cfg.window(i),
                    qkv_bias=self._bias(tensors, p),
                )
            )
        # Llama 3's scaled frequencies (the GGUF's rope_freqs.weight, or made from a config.json).
        factors = tensors.get("rope_freqs.weight")
        self.cos, self.sin = rope_tables(cfg.rope_theta, cfg.head_dim, cfg.max_position, self.compute_dtype, factors)
        # Windowed layers' tables where their base differs (Gemma 3's local base); else the same tensors.
        local = cfg.rope_local_theta != cfg.rope_theta
        self.cos_local, self.sin_local = (
            rope_tables(cfg.rope_local_theta, cfg.head_dim, cfg.max_position, self.compute_dtype)
            if local and any(la.window for la in self.layers)
            else (self.cos, self.sin)
        )
        self.act = ACTIVATIONS[cfg.activation]

    def matrix_shapes(self) -> list[tuple[int, int]]:
        """(out, in) of each distinct layer product, for kernels.row_invariance."""
        la = self.layers[0]
        shapes = set()
        for w in (la.qkv, la.o, la.gate_up, la.down):
            dense = w.full if isinstance(w, DualWeight) else w
            if isinstance(dense, torch.Tensor):
                shapes.add((dense.shape[0], dense.shape[1]))
        return sorted(shapes)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def runs_native_ops(self) -> bool:
        """Whether the native layer ops serve this model's steps (native format, on the CPU); their
        decode attention reads each row's length where the torch path reads a mask."""
        return self.native_layers and self.device.type == "cpu"

    def pack_cpu_weights(self) -> DecoderModel:
        """Reorder every bf16 matrix into oneDNN's layout once (kernels.pack_dense), in place.
        After `to(device)`: a packed matrix stays on the CPU."""

        def pk(w: Weight) -> Weight:
            if isinstance(w, DualWeight):
                return DualWeight(pk(w.full), w.small)  # type: ignore[arg-type]
            return pack_dense(w) if isinstance(w, torch.Tensor) else w

        self.lm_head = pk(self.lm_head)
        self.layers = [
            dataclasses.replace(la, qkv=pk(la.qkv), o=pk(la.o), gate_up=pk(la.gate_up), down=pk(la.down))
            for la in self.layers
        ]
        return self

    def to(self, device: str) -> DecoderModel:
        """Move every weight (and the RoPE tables) to `device`, in place."""

        def mv(w: Weight) -> Weight:
            return w.to(device)  # each stored form knows where it can live (kernels.Weight)

        self.embed = self.embed.to(device)
        self.norm = self.norm.to(device)
        self.lm_head = mv(self.lm_head)
        self.cos, self.sin = self.cos.to(device), self.sin.to(device)
        self.cos_local, self.sin_local = self.cos_local.to(device), self.sin_local.to(device)

        def nv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        self.layers = [
            dataclasses.replace(
                la,
                attn_norm=la.attn_norm.to(device),
                qkv=mv(la.qkv),
                o=mv(la.o),
                ffn_norm=la.ffn_norm.to(device),
                gate_up=mv(la.gate_up),
                down=mv(la.down),
                q_norm=nv(la.q_norm),
                k_norm=nv(la.k_norm),
                post_attn_norm=nv(la.post_attn_norm),
                post_ffn_norm=nv(la.post_ffn_norm),
                qkv_bias=nv(la.qkv_bias),
            )
            for la in self.layers
        ]
        return self

    @staticmethod
    def _weight(t: dict[str, torch.Tensor], name: str, fallback: str | None = None, native: bool = False) -> Weight:
        if not DecoderModel._stored(t, name):
            assert fallback is not None, name
            name = fallback
        if native:
            # Every product on the native kernels, prompt rows included: a row's bits depend on
            # that row alone, so replays and prefix-cache hits stay exact at any chunking.
            blocks = pack_blocks(t, name)
            return blocks if blocks is not None else Int8Weight(*(t[name + s] for s in INT8_STORED))
        small: Int8Weight | Int4Weight | None = None
        if name + ".q4" in t:
            small = pack_int4(t[name + ".q4"], t[name + ".q4dm"])
        elif name + INT8_STORED[0] in t:
            small = Int8Weight(*(t[name + s] for s in INT8_STORED))
        if name in t and small is not None:
            return DualWeight(t[name], small)
        return small if small is not None else t[name]

    @staticmethod
    def _bias(t: dict[str, torch.Tensor], prefix: str) -> torch.Tensor | None:
        """The q, k and v biases stacked as their matrices are (Qwen 2), or None."""
        names = [f"{prefix}{part}.bias" for part in FUSED["attn_qkv"]]
        return torch.cat([t[n].float() for n in names]) if all(n in t for n in names) else None

    @classmethod
    def _stacked(cls, t: dict[str, torch.Tensor], prefix: str, fused: str, native: bool) -> Weight:
        """A layer's parts multiplied as one matrix: stored stacked (weights.pack_native), or stacked here."""
        name = f"{prefix}{fused}.weight"
        if not (native and cls._stored(t, name)):
            t, name = stack_parts(t, prefix, FUSED[fused], prefix + "fused"), prefix + "fused"
        return cls._weight(t, name, native=native)

    @staticmethod
    def _stored(t: dict[str, torch.Tensor], name: str) -> bool:
        """Whether matrix `name` is in `t` in any stored form."""
        return any(name + suffix in t for suffix in stored_forms())

    @torch.inference_mode()
    def forward(self, batch: AttnBatch, kv: KVCache) -> torch.Tensor:
        """Run all scheduled tokens; returns fp32 logits for batch.logits_rows."""
        cfg = self.cfg
        nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        nqk = (nh + nkv) * hd
        inter = cfg.intermediate_size
        x = self.embed[batch.input_ids]
        if cfg.embed_scale != 1.0:
            x = x * cfg.embed_scale
        T = x.shape[0]
        # The quantized copy only for small steps of generated tokens: prompt tokens always take
        # the dense kernel, in calls of a row count inside the measured invariant range (see
        # kernels.py), so a prompt's KV does not depend on how it was split between the prefix
        # cache and prefill, and a quiet replay recomputes exactly what the original run computed.
        small = not batch.prefills and T <= self.small_max_rows
        inv, fr = self.invariance, batch.free_rows
        nat = self.runs_native_ops
        norm = native.rms_norm if nat else rms_norm
        stack = self._native_stack() if nat and not batch.prefills and batch.decode_lens is not None else None
        # What windowed layers attend over, built once for the step (Gemma 3; None for Llama).
        wins = {la.window for la in self.layers if la.window}
        local = {w: windowed(batch, w) for w in wins}
        if stack is not None:
            assert batch.decode_slots is not None
            x = stack.run(
                x, self.cos, self.sin, batch.positions, kv.k, kv.v, batch.slot_mapping,
                batch.decode_slots.view(T, -1), batch.decode_lens,
            )  # fmt: skip
        else:
            for li, layer in enumerate(self.layers):
                h = norm(x, layer.attn_norm, cfg.rms_eps)
                qkv = linear(h, layer.qkv, small, inv=inv, free_rows=fr)
                if layer.qkv_bias is not None:
                    qkv = qkv + layer.qkv_bias
                if layer.q_norm is not None and layer.k_norm is not None:
                    qkv = qk_norm(qkv, layer.q_norm, layer.k_norm, nh, nkv, hd, cfg.rms_eps, norm)
                kc, vc = kv.k[li], kv.v[li]
                cos, sin = (self.cos_local, self.sin_local) if layer.window else (self.cos, self.sin)
                if nat:
                    # Rotated in place, and k, v written to their slots, in one call; the k and v left in
                    # qkv are the stored (rounded) values, as later steps read them from the cache.
                    native.rope_store(qkv, cos, sin, batch.positions, kc, vc, batch.slot_mapping, nh, nkv)
                    q, k = qkv[:, : nh * hd].view(T, nh, hd), qkv[:, nh * hd : nqk].view(T, nkv, hd)
                    v = qkv[:, nqk:].view(T, nkv, hd)
                else:
                    q, k, v = self._rope_store(qkv, batch, kc, vc, nh, nkv, hd, cos, sin)
                attn = self._attention(q, k, v, kc, vc, local[layer.window] if layer.window else batch, nat)
                if layer.post_attn_norm is None:
                    # Products feeding a product or the residual stay in the kernel's dtype (keep=True):
                    # adding bf16 into the fp32 residual promotes without a separate cast.
                    x = x + linear(attn.reshape(T, nh * hd), layer.o, small, True, inv, fr)
                else:
                    x = x + norm(
                        linear(attn.reshape(T, nh * hd), layer.o, small, False, inv, fr),
                        layer.post_attn_norm,
                        cfg.rms_eps,
                    )
                h = norm(x, layer.ffn_norm, cfg.rms_eps)
                gu = linear(h, layer.gate_up, small, True, inv, fr)
                if nat and cfg.activation == "silu":
                    act = native.silu_mul(gu)  # the native op of layers.silu_gate
                else:
                    act = self.act(gu, inter)
                if layer.post_ffn_norm is None:
                    x = x + linear(act, layer.down, small, True, inv, fr)
                else:
                    x = x + norm(linear(act, layer.down, small, False, inv, fr), layer.post_ffn_norm, cfg.rms_eps)
        x = norm(x[batch.logits_rows], self.norm, cfg.rms_eps)
        # One row per sampling sequence: a quiet request's logits come from a call of one row.
        return linear(x, self.lm_head, small).float()

    def _native_stack(self) -> Any:
        """The layers as one native call (native/decode_stack.cpp), built on first use and again
        when the layers are replaced; None when off or where a matrix is not in block form."""
        if not self.use_decode_stack:
            return None
        if self._stack is None or self._stack[0] is not self.layers:
            self._stack = (self.layers, self._build_stack())
        return self._stack[1]

    def _build_stack(self) -> Any:
        cfg = self.cfg
        # decode_stack.cpp runs plain (Llama) layers with SiLU and the model's one RoPE table only.
        if cfg.activation != "silu" or not all(la.plain for la in self.layers):
            return None
        stack = native.decode_stack(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rms_eps)
        for la in self.layers:
            weights: list[torch.Tensor] = []
            kinds: list[int] = []
            for w in (la.qkv, la.o, la.gate_up, la.down):
                if not isinstance(w, BlockWeight):
                    return None
                kinds.append(w.product_id)
                weights += [w.values, w.d, w.m if w.m is not None else torch.empty(0)]
            stack.add_layer(la.attn_norm, la.ffn_norm, weights, kinds)
        return stack

    def _rope_store(
        self,
        qkv: torch.Tensor,
        batch: AttnBatch,
        kc: torch.Tensor,
        vc: torch.Tensor,
        nh: int,
        nkv: int,
        hd: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v of the step's rows, q and k rotated, k and v written to the cache."""
        T, nqk = qkv.shape[0], (nh + nkv) * hd
        # RoPE on q and k heads in one pass: they share positions.
        qk = qkv[:, :nqk].view(T, nh + nkv, hd)
        qk = torch.addcmul(
            qk * cos[batch.positions].unsqueeze(1), qk.roll(hd // 2, -1), sin[batch.positions].unsqueeze(1)
        )
        q, k = qk[:, :nh], qk[:, nh:]
        v = qkv[:, nqk:].view(T, nkv, hd)
        if kc.dtype != k.dtype:
            # Attention reads the stored (rounded) values even for keys computed this step,
            # so a row sees the same keys whether they came from the cache or not.
            k, v = k.to(kc.dtype), v.to(kc.dtype)
        kc.index_copy_(1, batch.slot_mapping, k.transpose(0, 1))
        vc.index_copy_(1, batch.slot_mapping, v.transpose(0, 1))
        return q, k, v

    def _attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
        batch: AttnBatch,
        nat: bool = False,
    ) -> torch.Tensor:
        if not batch.prefills:  # an all-decode step: no buffer to assemble
            return self._decode(q, kc, vc, batch, nat)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        if batch.num_decodes:
            out[: batch.num_decodes] = self._decode(q, kc, vc, batch, nat)
        for span in batch.prefills:
            # Prompt rows: fp32 SDPA, whose rows keep their bits however the prompt was chunked
            # (a bf16 SDPA's do not), over keys upcast from the cache's dtype.
            if span.start_pos == 0:
                rows = slice(span.row_start, span.row_start + span.q_len)
                kp = k[rows].transpose(0, 1).unsqueeze(0).to(q.dtype)
                vp = v[rows].transpose(0, 1).unsqueeze(0).to(q.dtype)
            else:
                kp = kc.index_select(1, span.ctx_slots).unsqueeze(0).to(q.dtype)
                vp = vc.index_select(1, span.ctx_slots).unsqueeze(0).to(q.dtype)
            extra = span.mask.shape[1] - kp.shape[2]
            kp, vp = F.pad(kp, (0, 0, 0, extra)), F.pad(vp, (0, 0, 0, extra))
            # Invariant: query rows [0, a) of the span are done; each slice sees the keys up to
            # its last real row, rounded up to KEY_BLOCK.
            for a in range(0, span.q_len, QUERY_SLICE):
                n = min(QUERY_SLICE, span.q_len - a)
                first = span.row_start + a
                qp = F.pad(q[first : first + n].transpose(0, 1).unsqueeze(0), (0, 0, 0, max(0, MIN_QUERY_ROWS - n)))
                keys = _round_up(span.start_pos + a + n, KEY_BLOCK)
                mask = span.mask[a : a + qp.shape[2], :keys]
                op = F.scaled_dot_product_attention(
                    qp, kp[:, :, :keys], vp[:, :, :keys], attn_mask=mask, enable_gqa=True
                )
                out[first : first + n] = op[0, :, :n].transpose(0, 1)
        return out

    def _decode(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, batch: AttnBatch, nat: bool) -> torch.Tensor:
        if nat and batch.decode_lens is not None:
            bd = batch.num_decodes
            assert batch.decode_slots is not None
            return native.decode_attention(q[:bd], kc, vc, batch.decode_slots.view(bd, -1), batch.decode_lens)
        return self._decode_attention(q, kc, vc, batch, self.fused_decode)

    @staticmethod
    def _decode_attention(
        q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, batch: AttnBatch, fused: bool = True
    ) -> torch.Tensor:
        """Attention of the single-token decodes in rows [0, num_decodes), as [num_decodes, heads, hd].

        Two ways, which of them is faster depends on the CPU (`measure_decode_attention`): plain
        fp32 batched matmuls over [kv_head, seq, ...], GQA as a reshape of q, with a bf16 cache's
        keys upcast first; or, on a bf16 cache with `fused`, bf16 SDPA (fp32 accumulation inside).
        On an AMX Xeon SDPA was 1.4x (one sequence) to 2x (32) faster; on an AVX-512-BF16 EPYC
        it was 3x (one) to 4x (32) slower.
        """
        bd = batch.num_decodes
        assert batch.decode_slots is not None and batch.decode_bias is not None
        nkv, hd = kc.shape[0], kc.shape[2]
        width = batch.decode_bias.shape[-1]
        # index_select on a flat index copies whole slot rows; advanced indexing with a 2-D
        # index was several times slower and dominated batched decode steps.
        kd = kc.index_select(1, batch.decode_slots).view(nkv, bd, width, hd)
        vd = vc.index_select(1, batch.decode_slots).view(nkv, bd, width, hd)
        if kc.dtype != q.dtype:
            if fused:
                qs = q[:bd].to(kc.dtype).view(bd, -1, 1, hd)
                bias = batch.decode_bias.view(bd, 1, 1, width).to(kc.dtype)
                o = F.scaled_dot_product_attention(
                    qs, kd.transpose(0, 1), vd.transpose(0, 1), attn_mask=bias, enable_gqa=True
                )
                return o.view(bd, -1, hd).to(q.dtype)
            kd, vd = kd.to(q.dtype), vd.to(q.dtype)
        qg = q[:bd].reshape(bd, nkv, -1, hd).transpose(0, 1)  # [nkv, bd, group, hd]
        scores = torch.matmul(qg, kd.transpose(-1, -2))
        scores.mul_(hd**-0.5).add_(batch.decode_bias)
        od = torch.matmul(torch.softmax(scores, dim=-1), vd)  # [nkv, bd, group, hd]
        return od.transpose(0, 1).reshape(bd, -1, hd)


def measure_decode_attention(cfg: ModelConfig, reps: int = 5) -> bool:
    """Whether fused bf16 SDPA beats upcast fp32 matmuls for decode attention on a bf16 cache
    here, timed on 1 and 16 sequences of 256 keys (about 0.1 s)."""
    g = torch.Generator().manual_seed(0)
    nkv, hd, nh = cfg.num_kv_heads, cfg.head_dim, cfg.num_heads
    kc = torch.randn(nkv, 4096, hd, generator=g).to(torch.bfloat16)
    vc = torch.randn(nkv, 4096, hd, generator=g).to(torch.bfloat16)
    total = {True: 0.0, False: 0.0}
    with torch.inference_mode():
        for bd in (1, 16):
            width = 256
            batch = AttnBatch(
                torch.zeros(bd, dtype=torch.long),
                torch.full((bd,), width - 1),
                torch.full((bd,), width - 1),
                bd,
                torch.randperm(4096, generator=g)[: bd * width],
                torch.zeros(1, bd, 1, width),
                [],
                torch.arange(bd),
                bd,
            )
            q = torch.randn(bd, nh, hd, generator=g)
            for fused in (True, False):
                best = float("inf")
                for _ in range(reps):
                    t = time.perf_counter()
                    DecoderModel._decode_attention(q, kc, vc, batch, fused)
                    best = min(best, time.perf_counter() - t)
                total[fused] += best
    return total[True] < total[False]


LlamaModel = DecoderModel  # the name earlier callers import
