"""What grammar-constrained decoding costs per token: the native engine at 1 and N streams,
unconstrained against JSON-object and JSON-schema constraints, plus the mask work alone.

    python bench/constraint_bench.py [--streams 1,32] [--max-tokens 32] [--dtype auto]

Prints a markdown table (docs/benchmarks.md keeps the measured one). Every stream decodes exactly
`--max-tokens` tokens: EOS is ignored, and the schemas' strings are long enough not to close first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.engine_bench import chat_prompt
from libs.engine import Constraint, EngineConfig, SamplingParams, create_engine

# A long free string: the grammar's mask changes at every token but never forces the end.
STORY = {"type": "object", "properties": {"story": {"type": "string", "minLength": 400}}, "required": ["story"]}
MODES: dict[str, Constraint | None] = {
    "none": None,
    "json_object": Constraint("json_object"),
    "json_schema": Constraint("json_schema", json.dumps(STORY)),
}


async def _one(eng: Any, rid: str, prompt: str, max_tokens: int, c: Constraint | None) -> tuple[int, float | None]:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, constraint=c)
    n, tpot = 0, None
    async for chunk in eng.generate(rid, prompt, params):
        n += len(chunk.token_ids)
        if chunk.finished and chunk.usage is not None:
            tpot = chunk.usage.tpot_s
    return n, tpot


def mask_cost_ms(eng: Any, rows: int, steps: int = 50) -> float:
    """Fill and apply the masks of `rows` constrained sequences, per step (off the engine thread's forward)."""
    import torch

    grammars = eng._grammars
    matchers = [grammars.matcher(MODES["json_schema"]) for _ in range(rows)]
    for m in matchers:
        m.accept_string('{"story": "Once')
    logits = torch.randn(rows, grammars.vocab_size)
    t = time.perf_counter()
    for _ in range(steps):
        grammars.apply(logits, grammars.fill_async(matchers).result(), list(range(rows)))
    return (time.perf_counter() - t) / steps * 1000


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="1,32")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rounds", type=int, default=3, help="run every cell this many times; keep the best")
    args = ap.parse_args()
    eng = create_engine(EngineConfig(dtype=args.dtype))
    await eng.start()
    tok = eng.tokenizer
    for mode, c in MODES.items():  # loads xgrammar and compiles each grammar once
        await _one(eng, f"warm-{mode}", chat_prompt(tok, 0), 4, c)
    rows = []
    for s in [int(x) for x in args.streams.split(",")]:
        for mode, c in MODES.items():
            best_tpot, best_agg = float("inf"), 0.0
            for r in range(args.rounds):
                t = time.perf_counter()
                outs = await asyncio.gather(
                    *(_one(eng, f"{mode}-{s}-{r}-{i}", chat_prompt(tok, i), args.max_tokens, c) for i in range(s))
                )
                el = time.perf_counter() - t
                tpots = [o[1] for o in outs if o[1] is not None]
                best_tpot = min(best_tpot, statistics.mean(tpots) * 1000)
                best_agg = max(best_agg, sum(o[0] for o in outs) / el)
            rows.append((s, mode, best_tpot, best_agg))
    print(
        f"engine dtype {getattr(eng, 'dtype', args.dtype)}, {args.max_tokens} tokens per stream, best of {args.rounds}\n"
    )
    print("| streams | constraint | TPOT ms | vs none | aggregate tok/s | mask fill+apply ms/step |")
    print("|---|---|---|---|---|---|")
    base = {s: tp for s, m, tp, _ in rows if m == "none"}
    for s, mode, tpot, agg in rows:
        mask = f"{mask_cost_ms(eng, s):.2f}" if mode == "json_schema" else ""
        print(f"| {s} | {mode} | {tpot:.1f} | {tpot / base[s]:.2f}x | {agg:.1f} | {mask} |")
    await eng.stop()


if __name__ == "__main__":
    asyncio.run(main())
