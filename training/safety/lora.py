"""Low-rank adapters (LoRA) for MiniLM, in plain torch.

Each adapted ``nn.Linear`` computes ``base(x) + scale * (x @ A.T) @ B.T`` with a frozen ``base``,
``A`` (rank x in) and ``B`` (out x rank, zero at the start, so an untrained adapter changes
nothing). After training, ``adapter_arrays`` stores them in the weight file; at run time
``switchyard.libs.safety.classifier.adapter_deltas`` turns them into per-weight updates ``scale * B @ A`` that
``Embedder(weight_deltas=...)`` adds to a fresh model's weights: inference then costs exactly one
ordinary MiniLM forward pass, and needs nothing from this module.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Suffixes of the ``nn.Linear`` modules adapted in every encoder layer: attention query and value,
# and both feed-forward projections.
TARGETS = ("attention.self.query", "attention.self.value", "intermediate.dense", "output.dense")


def _lora_linear_class() -> Any:
    import torch
    from torch import nn

    class LoRALinear(nn.Module):
        def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
            super().__init__()
            self.base = base
            for p in base.parameters():
                p.requires_grad_(False)
            self.scale = alpha / rank
            self.A = nn.Parameter(torch.empty(rank, base.in_features))
            nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.B = nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.A.T @ self.B.T) * self.scale

    return LoRALinear


def add_lora(model: Any, rank: int, alpha: float, targets: tuple[str, ...] = TARGETS) -> dict[str, Any]:
    """Freeze ``model`` and wrap every target linear layer; returns ``{module name: adapter}``."""
    for p in model.parameters():
        p.requires_grad_(False)
    cls = _lora_linear_class()
    names = [
        n
        for n, _ in model.named_modules()
        if n.startswith("encoder.layer.") and n.endswith(targets) and not n.endswith("attention.output.dense")
    ]
    adapters: dict[str, Any] = {}
    for name in names:
        parent_name, attr = name.rsplit(".", 1)
        parent = model.get_submodule(parent_name)
        adapters[name] = cls(getattr(parent, attr), rank, alpha)
        setattr(parent, attr, adapters[name])
    return adapters


def adapter_arrays(adapters: dict[str, Any], dtype: type = np.float16) -> dict[str, np.ndarray]:
    """``{"lora_A:<name>": ..., "lora_B:<name>": ...}`` with the scale folded into ``B``."""
    out: dict[str, np.ndarray] = {}
    for name, m in adapters.items():
        out[f"lora_A:{name}"] = m.A.detach().cpu().numpy().astype(dtype)
        out[f"lora_B:{name}"] = (m.B.detach().cpu().numpy() * m.scale).astype(dtype)
    return out
