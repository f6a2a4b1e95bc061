"""Next-token selection: greedy, temperature, min-p, top-k, top-p, with a generator per request.

Each row is filtered and sampled alone, so a request's token never depends on the rest of its batch.
The order is vLLM's: temperature, then min-p, then top-k and top-p."""

from __future__ import annotations

import math

import torch

from switchyard.libs.engine.types import SamplingParams


def filtered(row: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """One row of temperature-scaled logits with the tokens min-p and top-k exclude at -inf."""
    if p.min_p > 0.0:
        # p(t) >= min_p * p(max)  <=>  logit(t) >= logit(max) + log(min_p): no softmax needed.
        row = row.masked_fill(row < row.max() + math.log(p.min_p), float("-inf"))
    if p.top_k > 0 and p.top_k < row.shape[-1]:
        kth = torch.topk(row, p.top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    return row


def sample(logits: torch.Tensor, params: list[SamplingParams], gens: list[torch.Generator | None]) -> list[int]:
    """logits: [S, V] fp32, one row per sampling request."""
    greedy = logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for i, p in enumerate(params):
        if p.temperature <= 0.0:
            out.append(int(greedy[i]))
            continue
        row = filtered(logits[i] / p.temperature, p)
        probs = torch.softmax(row, dim=-1)
        if p.top_p < 1.0:
            sp, idx = torch.sort(probs, descending=True)
            # Keep the smallest head whose mass reaches top_p (always at least one token).
            drop = (sp.cumsum(-1) - sp) >= p.top_p
            sp = sp.masked_fill(drop, 0.0)
            choice = torch.multinomial(sp / sp.sum(), 1, generator=gens[i])
            out.append(int(idx[choice]))
        else:
            out.append(int(torch.multinomial(probs, 1, generator=gens[i])))
    return out
