"""Turns a list of scheduled chunks into one flattened forward pass over the paged cache."""

from __future__ import annotations

import torch

from libs.engine.model import AttnBatch, KVCache, LlamaModel, PrefillSpan
from libs.engine.scheduler import ScheduledSeq


class ModelRunner:
    def __init__(self, model: LlamaModel, kv: KVCache) -> None:
        self.model = model
        self.kv = kv
        self.block_size = kv.block_size
        self._offsets = torch.arange(self.block_size)

    def _slots(self, block_ids: list[int], start: int, end: int) -> list[int]:
        bs = self.block_size
        return [block_ids[p // bs] * bs + p % bs for p in range(start, end)]

    def build(self, seqs: list[ScheduledSeq]) -> AttnBatch:
        bs = self.block_size
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        decode_rows: list[int] = []
        decode_tables: list[list[int]] = []
        decode_lens: list[int] = []
        prefills: list[PrefillSpan] = []
        logits_rows: list[int] = []
        for seq in seqs:
            req, n = seq.request, seq.num_new_tokens
            start = req.num_computed
            row = len(ids)
            ids.extend(req.all_ids[start : start + n])
            pos.extend(range(start, start + n))
            slots.extend(self._slots(req.block_ids, start, start + n))
            if n == 1 and start > 0:
                decode_rows.append(row)
                nblk = -(-(start + 1) // bs)
                decode_tables.append(req.block_ids[:nblk])
                decode_lens.append(start + 1)
            else:
                ctx = torch.tensor(self._slots(req.block_ids, 0, start + n)) if start > 0 else torch.empty(0)
                prefills.append(PrefillSpan(row, n, start, ctx.long()))
            if seq.samples:
                logits_rows.append(row + n - 1)
        d_rows = d_slots = d_mask = None
        if decode_rows:
            width = max(len(t) for t in decode_tables)
            table = torch.tensor([t + [0] * (width - len(t)) for t in decode_tables])
            d_slots = (table.unsqueeze(-1) * bs + self._offsets).view(len(decode_rows), width * bs)
            d_mask = torch.arange(width * bs).unsqueeze(0) < torch.tensor(decode_lens).unsqueeze(1)
            d_mask = d_mask.view(len(decode_rows), 1, 1, width * bs)
            d_rows = torch.tensor(decode_rows)
        return AttnBatch(
            input_ids=torch.tensor(ids),
            positions=torch.tensor(pos),
            slot_mapping=torch.tensor(slots),
            decode_rows=d_rows,
            decode_slots=d_slots,
            decode_mask=d_mask,
            prefills=prefills,
            logits_rows=torch.tensor(logits_rows, dtype=torch.long),
        )

    def run(self, seqs: list[ScheduledSeq]) -> torch.Tensor:
        """fp32 logits, one row per sequence whose chunk reaches its last known token."""
        return self.model.forward(self.build(seqs), self.kv)
