"""Turns a list of scheduled chunks into one flattened forward pass over the paged cache."""

from __future__ import annotations

import torch

from switchyard.libs.engine.model import AttnBatch, DecoderModel, KVCache, PrefillSpan, prefill_mask
from switchyard.libs.engine.scheduler import ScheduledSeq


class ModelRunner:
    def __init__(self, model: DecoderModel, kv: KVCache) -> None:
        self.model = model
        self.kv = kv
        self.block_size = kv.block_size
        self._offsets = torch.arange(self.block_size)

    def _slots(self, block_ids: list[int], start: int, end: int) -> list[int]:
        bs = self.block_size
        return [block_ids[p // bs] * bs + p % bs for p in range(start, end)]

    def build(self, seqs: list[ScheduledSeq]) -> AttnBatch:
        bs = self.block_size
        # Single-token decodes of generated tokens take the first rows, so attention reads them
        # as one slice and their products may be shared freely (free_rows). A prompt's last token
        # stays a prefill chunk even when it is the only one left: its row must get the bits it
        # gets inside a longer chunk (see kernels.py).
        is_decode = [s.num_new_tokens == 1 and s.request.num_computed >= len(s.request.prompt_ids) for s in seqs]
        decodes = [s for s, d in zip(seqs, is_decode, strict=True) if d]
        chunks = [s for s, d in zip(seqs, is_decode, strict=True) if not d]
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[PrefillSpan] = []
        last_row: dict[int, int] = {}  # id(seq) -> its last row, where its logits come from
        for seq in [*decodes, *chunks]:
            req, n = seq.request, seq.num_new_tokens
            start = req.num_computed
            row = len(ids)
            ids.extend(req.all_ids[start : start + n])
            pos.extend(range(start, start + n))
            slots.extend(self._slots(seq.block_ids, start, start + n))
            if row < len(decodes):
                decode_tables.append(seq.block_ids[: -(-(start + 1) // bs)])
                decode_lens.append(start + 1)
            else:
                # Built once per step, not once per layer: the chunk sees its cached prefix and
                # itself causally.
                ctx = (
                    torch.tensor(self._slots(seq.block_ids, 0, start + n))
                    if start
                    else torch.empty(0, dtype=torch.long)
                )
                prefills.append(PrefillSpan(row, n, start, ctx, prefill_mask(start, n)))
            last_row[id(seq)] = row + n - 1
        d_slots = d_bias = None
        if decodes:
            width = max(len(t) for t in decode_tables)
            table = torch.tensor([t + [0] * (width - len(t)) for t in decode_tables])
            d_slots = (table.unsqueeze(-1) * bs + self._offsets).view(-1)
            if not self.model.runs_native_ops:
                pad = torch.arange(width * bs).unsqueeze(0) >= torch.tensor(decode_lens).unsqueeze(1)
                d_bias = torch.zeros(pad.shape).masked_fill_(pad, float("-inf")).view(1, len(decodes), 1, width * bs)
        return AttnBatch(
            input_ids=torch.tensor(ids),
            positions=torch.tensor(pos),
            slot_mapping=torch.tensor(slots),
            num_decodes=len(decodes),
            decode_slots=d_slots,
            decode_bias=d_bias,
            prefills=prefills,
            # In the order of `seqs`: the engine pairs sampled tokens with sequences by position.
            logits_rows=torch.tensor([last_row[id(s)] for s in seqs if s.samples], dtype=torch.long),
            free_rows=len(decodes),
            decode_lens=torch.tensor(decode_lens) if decodes else None,
        )

    def run(self, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """fp32 logits on the CPU, one row per sequence whose chunk reaches its last known token."""
        device = self.model.device
        return self.model.forward(self.build(seqs).to(device), self.kv).cpu()
