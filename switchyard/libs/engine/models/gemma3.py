"""Gemma 3 (text), as llama.cpp reads it: the embedding scaled by sqrt(hidden) (in fp32), QK-norm,
RMSNorms of the attention and FFN outputs before each joins the residual (the GGUF's norm weights
already hold Gemma's `1 + w`), GeGLU with gelu's tanh form, and every layer but each sixth a
sliding-window layer with RoPE base 10 000. GGUF only: a checkpoint directory's norms would need
the `1 + w` and its own layer pattern."""

from __future__ import annotations

import numpy as np
import torch

from switchyard.libs.engine.models.base import Definition, GgufMeta, ModelConfig


class Gemma3(Definition):
    family = "gemma3"
    gguf_archs = ("gemma3",)

    def config_from_gguf(self, meta: GgufMeta, tensors: dict[str, torch.Tensor]) -> ModelConfig:
        cfg = super().config_from_gguf(meta, tensors)
        # llama.cpp scales by sqrtf(n_embd) in fp32 (src/models/gemma3.cpp); llama-model.cpp sets
        # set_swa_pattern(6) and rope_freq_base_train_swa = 10000 for gemma3.
        cfg.embed_scale = float(np.sqrt(np.float32(cfg.hidden_size)))
        cfg.swa_pattern = 6
        cfg.rope_local_theta = 10000.0
        cfg.activation = "gelu_tanh"
        return cfg
