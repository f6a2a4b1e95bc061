"""The native engine on CUDA, in one prepared run: agreement with the CPU, then speed.

    python bench/gpu_check.py --out docs/benchmarks.md [--streams 1,32,128]

1. Greedy agreement: the same prompts through the CPU engine (fp32) and the CUDA engine
   (fp32, then the bf16 that `auto` picks on a GPU); token-identical prefixes are counted.
2. TTFT, TPOT and aggregate output tokens/s at each stream count on CUDA.
3. With --trtllm-model DIR (default SWITCHYARD_TRTLLM_MODEL) and `tensorrt_llm` importable: the
   TensorRT-LLM adapter on the checkpoint `python -m switchyard.cli export-hf DIR` wrote, the same two checks.

Written for a lent GPU machine (the project's CI has none); it exits with a note where torch
sees no CUDA device.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import write_section
from switchyard.libs.engine import EngineConfig, EngineSettings, SamplingParams, create_engine

MARK_BEGIN = "<!-- gpu_bench:begin -->"
MARK_END = "<!-- gpu_bench:end -->"
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain how a bicycle works.",
]


async def _run(eng: Any, rid: str, prompt: str, max_tokens: int, ignore_eos: bool = False) -> tuple[list[int], Any]:
    ids: list[int] = []
    usage = None
    async for c in eng.generate(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)):
        ids += c.token_ids
        if c.finished:
            usage = c.usage
    return ids, usage


async def greedy(config: EngineConfig, max_tokens: int) -> list[list[int]]:
    eng = create_engine(EngineSettings().apply(config))
    await eng.start()
    tok = eng.tokenizer
    outs = [
        (await _run(eng, f"g{i}", tok.apply_chat_template([{"role": "user", "content": p}]), max_tokens))[0]
        for i, p in enumerate(PROMPTS)
    ]
    await eng.stop()
    return outs


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


async def speed(config: EngineConfig, streams: list[int], max_tokens: int) -> dict[int, dict[str, float]]:
    eng = create_engine(EngineSettings().apply(dataclasses.replace(config, max_num_seqs=max(streams))))
    await eng.start()
    tok = eng.tokenizer
    prompt = [
        tok.apply_chat_template([{"role": "user", "content": f"{PROMPTS[i % 4]} ({i})"}]) for i in range(max(streams))
    ]
    await _run(eng, "warm", prompt[0], 8)
    res: dict[int, dict[str, float]] = {}
    for s in streams:
        t = time.perf_counter()
        outs = await asyncio.gather(*(_run(eng, f"s{s}-{i}", prompt[i], max_tokens, True) for i in range(s)))
        el = time.perf_counter() - t
        us = [u for _, u in outs if u is not None]
        res[s] = {
            "tok_s": sum(len(ids) for ids, _ in outs) / el,
            "ttft_ms": 1000 * statistics.median(u.ttft_s for u in us if u.ttft_s is not None),
            "tpot_ms": 1000 * statistics.median(u.tpot_s for u in us if u.tpot_s is not None),
        }
    await eng.stop()
    return res


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--streams", default="1,32,128")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--trtllm-model", default=EngineSettings().trtllm_model, help="HF checkpoint directory")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    streams = [int(s) for s in args.streams.split(",")]
    cpu = asyncio.run(greedy(EngineConfig(device="cpu", dtype="fp32"), 32))
    configs = {d: EngineConfig(device="cuda", dtype=d) for d in ("bf16", "fp32")}
    trt_note = ""
    if args.trtllm_model:
        try:
            import tensorrt_llm  # noqa: F401
        except ImportError as e:
            trt_note = f"- TensorRT-LLM skipped: `import tensorrt_llm` failed ({e})"
        else:
            configs["tensorrt_llm"] = EngineConfig(kind="tensorrt_llm", trtllm_model=args.trtllm_model)
    agree = {d: asyncio.run(greedy(c, 32)) for d, c in configs.items()}
    lines = [
        MARK_BEGIN,
        "### Native engine on CUDA",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; GPU: {torch.cuda.get_device_name(0)}; "
        f"torch {torch.__version__}",
        f"- command: `python bench/gpu_check.py {' '.join(sys.argv[1:])}`",
        *([trt_note] if trt_note else []),
        "",
        "Greedy agreement with the CPU engine (fp32), 32 tokens per prompt: identical leading tokens / 32",
        "",
        "| CUDA weights (or engine) | " + " | ".join(f"prompt {i + 1}" for i in range(len(PROMPTS))) + " |",
        "|---|" + "---|" * len(PROMPTS),
    ]
    for d, outs in agree.items():
        lines.append(f"| {d} | " + " | ".join(str(common_prefix(a, b)) for a, b in zip(cpu, outs, strict=True)) + " |")
    lines += ["", f"Speed ({args.max_tokens} new tokens per stream, EOS ignored):", ""]
    lines += ["| weights | streams | aggregate tok/s | median TTFT ms | median TPOT ms |", "|---|---|---|---|---|"]
    for d, config in configs.items():
        for s, r in asyncio.run(speed(config, streams, args.max_tokens)).items():
            lines.append(f"| {d} | {s} | {r['tok_s']:.0f} | {r['ttft_ms']:.1f} | {r['tpot_ms']:.2f} |")
    lines += [MARK_END, ""]
    section = "\n".join(lines)
    write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
