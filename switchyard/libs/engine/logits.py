"""Per-sequence logit changes before sampling: logit bias and the three repetition penalties.

Each one reads only its own row and its own request's tokens, so a sequence's output never depends
on the other sequences in its batch, and the same request replays to the same tokens. The semantics
are OpenAI's and vLLM's: `logit_bias` is added to the logits; `repetition_penalty` (vLLM, after
Keskar et al.) divides a positive logit and multiplies a negative one for every token seen in the
prompt or the output; `frequency_penalty` subtracts per occurrence in the output, and
`presence_penalty` once for any occurrence in the output."""

from __future__ import annotations

import torch

from switchyard.libs.engine.types import SamplingParams, TokenLogprobs


def adjusts(p: SamplingParams) -> bool:
    return bool(p.logit_bias) or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0 or p.repetition_penalty != 1.0


def bad_bias_token(p: SamplingParams, vocab_size: int) -> int | None:
    """A `logit_bias` token id outside the vocabulary (refused rather than skipped)."""
    return next((t for t in p.logit_bias if not 0 <= t < vocab_size), None)


@torch.inference_mode()  # the logits are inference tensors: in-place changes need the mode they were made in
def adjust_row(row: torch.Tensor, p: SamplingParams, prompt_ids: list[int], output_ids: list[int]) -> None:
    """Applies `p`'s bias and penalties to one row of fp32 logits, in place."""
    if p.logit_bias:
        ids = torch.tensor(list(p.logit_bias), dtype=torch.long)
        row.index_add_(0, ids, torch.tensor(list(p.logit_bias.values()), dtype=row.dtype))
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted({*prompt_ids, *output_ids}), dtype=torch.long)
        vals = row[seen]
        row[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if output_ids and (p.frequency_penalty != 0.0 or p.presence_penalty != 0.0):
        ids, counts = torch.tensor(output_ids, dtype=torch.long).unique(return_counts=True)
        row[ids] -= counts.to(row.dtype) * p.frequency_penalty + p.presence_penalty


@torch.inference_mode()
def log_probs(row: torch.Tensor) -> torch.Tensor:
    """One row's log-softmax, computed alone so it never depends on the rest of the batch."""
    return torch.log_softmax(row, dim=-1)


def token_logprobs(lp: torch.Tensor, token: int, top: int) -> TokenLogprobs:
    """The sampled token's log probability and the `top` most likely (id, log probability), best first."""
    alternatives: list[tuple[int, float]] = []
    if top > 0:
        values, ids = torch.topk(lp, top)
        alternatives = list(zip(ids.tolist(), values.tolist(), strict=True))
    return TokenLogprobs(token, float(lp[token]), alternatives)
