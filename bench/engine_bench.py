"""Engine benchmark: decode speed, batching, prefix-cache TTFT, vs transformers / llama.cpp.

    python bench/engine_bench.py --out docs/benchmarks.md [--quick]

Writes a markdown section (appended to --out, or replacing this benchmark's earlier section).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import resource
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from libs.engine import EngineConfig, SamplingParams, create_engine, default_model_path
from libs.tokenizer import load_tokenizer

MARK_BEGIN = "<!-- engine_bench:begin -->"
MARK_END = "<!-- engine_bench:end -->"
QUESTIONS = [
    "Explain how a bicycle works.",
    "Write a short story about a lighthouse keeper.",
    "What are the benefits of regular exercise?",
    "Describe the water cycle.",
]


def chat_prompt(tok: Any, i: int) -> str:
    return tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" ({i})"}])


async def one(eng: Any, rid: str, prompt: str, max_tokens: int) -> tuple[int, float | None]:
    n, ttft = 0, None
    async for c in eng.generate(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True)):
        n += len(c.token_ids)
        if c.finished and c.usage is not None:
            ttft = c.usage.ttft_s
    return n, ttft


async def bench_native(dtype: str, streams: list[int], max_tokens: int, turns: int) -> dict[str, Any]:
    res: dict[str, Any] = {"dtype": dtype}
    eng = create_engine(EngineConfig(dtype=dtype))
    t = time.perf_counter()
    await eng.start()
    res["load_s"] = time.perf_counter() - t
    tok = eng.tokenizer
    await one(eng, "warm", chat_prompt(tok, 0), 4)
    # Single stream: decode rate excludes the first token (that is TTFT).
    t = time.perf_counter()
    n, ttft = await one(eng, "single", chat_prompt(tok, 1), max_tokens)
    el = time.perf_counter() - t
    res["single_ttft_s"] = ttft
    res["single_tok_s"] = (n - 1) / (el - (ttft or 0))
    for s in streams:
        t = time.perf_counter()
        outs = await asyncio.gather(
            *(one(eng, f"c{s}-{i}", chat_prompt(tok, i), max_tokens) for i in range(s))
        )
        res[f"agg_{s}"] = sum(o[0] for o in outs) / (time.perf_counter() - t)
    await eng.stop()
    return res


async def bench_turns(dtype: str, turns: int, caching: bool) -> tuple[float, float]:
    """TTFT of turn 1 and turn `turns` of one growing conversation."""
    eng = create_engine(EngineConfig(dtype=dtype, enable_prefix_caching=caching))
    await eng.start()
    tok = eng.tokenizer
    msgs: list[dict[str, str]] = []
    ttfts: list[float] = []
    for t in range(turns):
        msgs.append({"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]})
        text, ttft = "", 0.0
        prompt = tok.apply_chat_template(msgs)
        async for c in eng.generate(f"turn{t}", prompt, SamplingParams(max_tokens=48)):
            text += c.text
            if c.finished and c.usage is not None:
                ttft = c.usage.ttft_s or 0.0
        ttfts.append(ttft)
        msgs.append({"role": "assistant", "content": text})
    await eng.stop()
    return ttfts[0], ttfts[-1]


def bench_dtype_ab(dtypes: list[str], batches: list[int], reps: int = 5) -> dict[str, dict[int, float]]:
    """Min time of one decode step per dtype, interleaved so that load from other processes on
    a shared box hits every dtype alike (the engine-level numbers above are far noisier)."""
    import torch

    from libs.engine.engine import engine_threads
    from libs.engine.model import AttnBatch, KVCache, LlamaModel
    from libs.engine.weights import load_weights

    torch.set_num_threads(engine_threads())
    models = {}
    for d in dtypes:
        cfg, w = load_weights(default_model_path(), d, os.path.join("var", "cache", "engine"))
        models[d] = LlamaModel(cfg, w, d)
    kv = KVCache(cfg, 64, 16, torch.float32)
    ctx = 128
    out: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    for b in batches:
        batch = AttnBatch(
            input_ids=torch.arange(b) + 100,
            positions=torch.full((b,), ctx - 1),
            slot_mapping=torch.full((b,), ctx - 1),
            decode_rows=torch.arange(b),
            decode_slots=torch.arange(ctx).expand(b, -1).contiguous(),
            decode_mask=torch.ones(b, 1, 1, ctx, dtype=torch.bool),
            prefills=[],
            logits_rows=torch.arange(b),
        )
        for _ in range(reps):
            for d, m in models.items():
                t = time.perf_counter()
                m.forward(batch, kv)
                el = time.perf_counter() - t
                out[d][b] = min(out[d].get(b, 1e9), el)
    return out


def bench_hf(streams: list[int], max_tokens: int) -> dict[str, Any]:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        return {"note": f"transformers not importable: {exc}"}
    from libs.engine.engine import engine_threads

    torch.set_num_threads(engine_threads())
    path = default_model_path()
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.padding_side = "left"
    ours = load_tokenizer(path)  # renders the same prompt strings as the native runs
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    res: dict[str, Any] = {}
    for s in [1, *streams]:
        prompts = [chat_prompt(ours, i) for i in range(s)]
        batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                **batch, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False, pad_token_id=0
            )
        n = (out.shape[1] - batch["input_ids"].shape[1]) * s
        res[f"agg_{s}"] = n / (time.perf_counter() - t)
    return res


def bench_llama_cpp(max_tokens: int) -> dict[str, Any]:
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        return {"note": "llama-cpp-python not installed (not built here)"}
    llm = Llama(model_path=default_model_path(), n_ctx=2048, verbose=False)
    t = time.perf_counter()
    out = llm(QUESTIONS[0], max_tokens=max_tokens)
    return {"agg_1": out["usage"]["completion_tokens"] / (time.perf_counter() - t)}


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}{unit}" if v < 10 else f"{v:.1f}{unit}"
    return str(v)


def render(
    args: argparse.Namespace,
    native: list[dict[str, Any]],
    turns: dict[str, tuple[float, float]],
    hf: dict[str, Any],
    lcpp: dict[str, Any],
    rss_mb: float,
    ab: dict[str, dict[int, float]] | None = None,
) -> str:
    lines = [
        MARK_BEGIN,
        "## Engine benchmark",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared with other processes), "
        f"torch threads per engine: from SWITCHYARD_ENGINE_THREADS or cores-1",
        f"- command: `python bench/engine_bench.py {' '.join(sys.argv[1:])}`",
        f"- model: {os.path.basename(default_model_path())}; "
        f"{args.max_tokens} new tokens per stream, EOS ignored",
        "",
        "| engine | dtype | load s | 1-stream TTFT s | 1-stream decode tok/s | "
        + " | ".join(f"{s} streams tok/s" for s in args.streams)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(args.streams),
    ]
    for r in native:
        lines.append(
            f"| native | {r['dtype']} | {fmt(r['load_s'])} | "
            f"{fmt(r['single_ttft_s'])} | {fmt(r['single_tok_s'])} | "
            + " | ".join(fmt(r.get(f"agg_{s}")) for s in args.streams)
            + " |"
        )
    if "note" in hf:
        lines.append(f"| transformers | fp32 | - | - | - | {hf['note']} |")
    else:
        lines.append(
            f"| transformers generate (batched) | fp32 | - | - | {fmt(hf.get('agg_1'))} | "
            + " | ".join(fmt(hf.get(f"agg_{s}")) for s in args.streams)
            + " |"
        )
    if "note" in lcpp:
        lines.append(f"| llama-cpp-python | Q4_1 | - | - | - | {lcpp['note']} |")
    else:
        lines.append(f"| llama-cpp-python | Q4_1 | - | - | {fmt(lcpp.get('agg_1'))} | |")
    lines += [
        "",
        f"TTFT of a growing conversation ({args.turns} turns, 48 new tokens per turn, "
        f"dtype {args.dtypes[0]}):",
        "",
        "| prefix caching | turn 1 TTFT s | last turn TTFT s | ratio |",
        "|---|---|---|---|",
    ]
    for k, (a, b) in turns.items():
        lines.append(f"| {k} | {a:.3f} | {b:.3f} | {b / a if a else float('nan'):.2f}x |")
    if ab:
        batches = sorted(next(iter(ab.values())))
        lines += [
            "",
            "Weight format sweep: best-of-5 time of one decode step (128-token context), "
            "dtypes interleaved, tokens/s in brackets:",
            "",
            "| dtype | " + " | ".join(f"batch {b}" for b in batches) + " |",
            "|---|" + "---|" * len(batches),
        ]
        for d, row in ab.items():
            lines.append(
                f"| {d} | " + " | ".join(f"{row[b] * 1000:.0f} ms ({b / row[b]:.0f})" for b in batches) + " |"
            )
    lines += ["", f"Peak RSS of the benchmark process (native engines only): {rss_mb:.0f} MiB", MARK_END, ""]
    return "\n".join(lines)


def write(out: str, section: str) -> None:
    old = open(out).read() if os.path.exists(out) else "# Benchmarks\n\n"
    if MARK_BEGIN in old and MARK_END in old:
        head, rest = old.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1].lstrip("\n")
        new = head + section + tail
    else:
        new = old.rstrip("\n") + "\n\n" + section
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write(new)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--dtypes", default="fp32,bf16,int8")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--reuse-native", action="store_true", help="reuse bench/results/native.json")
    ap.add_argument("--dtype-sweep", action="store_true", help="interleaved per-step dtype comparison")
    args = ap.parse_args()
    args.dtypes = args.dtypes.split(",")
    args.streams = [int(s) for s in args.streams.split(",")]
    saved = os.path.join("bench", "results", "native.json")
    if args.reuse_native and os.path.exists(saved):
        # Resume after a failure in a later phase: the native runs take longest.
        with open(saved) as fh:
            blob = json.load(fh)
        native, turns, rss_mb = (
            blob["native"],
            {k: tuple(v) for k, v in blob["turns"].items()},
            blob["rss_mb"],
        )
        if not rss_mb:
            asyncio.run(bench_native(args.dtypes[0], [8], 8, 1))
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    else:
        native = []
        for d in args.dtypes:
            print(f"native {d} ...", flush=True)
            native.append(asyncio.run(bench_native(d, args.streams, args.max_tokens, args.turns)))
            print(native[-1], flush=True)
        turns = {}
        for caching in (True, False):
            turns["on" if caching else "off"] = asyncio.run(bench_turns(args.dtypes[0], args.turns, caching))
            print("turns", caching, turns, flush=True)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        os.makedirs(os.path.dirname(saved), exist_ok=True)
        with open(saved, "w") as fh:
            json.dump({"native": native, "turns": turns, "rss_mb": rss_mb}, fh)
    ab = None
    if args.dtype_sweep:
        ab = bench_dtype_ab(["fp32", "int8", "hybrid"], [1, 8, 32])
        print("sweep", ab, flush=True)
    hf: dict[str, Any] = {"note": "skipped (--no-baselines)"}
    lcpp: dict[str, Any] = {"note": "skipped (--no-baselines)"}
    if not args.no_baselines:
        print("transformers ...", flush=True)
        hf = bench_hf(args.streams, args.max_tokens)
        print(hf, flush=True)
        lcpp = bench_llama_cpp(args.max_tokens)
    section = render(args, native, turns, hf, lcpp, rss_mb, ab)
    write(args.out, section)
    print(section)


if __name__ == "__main__":
    main()
