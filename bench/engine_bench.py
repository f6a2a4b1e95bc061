"""Engine benchmark: the native engine against transformers and llama-cpp-python, in one run.

    python bench/engine_bench.py --out docs/benchmarks.md [--quick] [--no-baselines]

Every engine runs in its own worker process (`--worker ...`), one after another, so each peak
RSS is its own and no engine warms another's caches. Where the vLLM virtualenv exists (`make
setup-vllm`), vLLM is a peer row, its worker run by that environment's python (bench/vllm_bench.py).
Every engine gets the same number of threads: SWITCHYARD_ENGINE_THREADS, else every core. The result is a markdown section written
into --out (replacing this benchmark's earlier section), with the targets of the engine issue
as ratios against the baselines measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
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
from switchyard.libs.engine import EngineConfig, EngineSettings, SamplingParams, create_engine
from switchyard.libs.engine.threads import engine_threads
from switchyard.libs.tokenizer import load_tokenizer

MARK_BEGIN = "<!-- engine_bench:begin -->"
MARK_END = "<!-- engine_bench:end -->"
# `--isa avx2`: every engine held to AVX2 code on a newer CPU, in a section of its own.
AVX2_BEGIN = "<!-- engine_bench:avx2:begin -->"
AVX2_END = "<!-- engine_bench:avx2:end -->"
# What holds each engine to AVX2: ours (SWITCHYARD_KERNEL_ISA), torch's own kernels and oneDNN's.
# llama.cpp picks its code at build time: --llama-cpp-path names a build without AVX-512.
AVX2_ENV = {"SWITCHYARD_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
QUESTIONS = [
    "Explain how a bicycle works.",
    "Write a short story about a lighthouse keeper.",
    "What are the benefits of regular exercise?",
    "Describe the water cycle.",
]
# llama-cpp-python serves one request at a time: beyond this many streams its aggregate rate is
# its sequential rate, so larger counts are not run (they would only cost minutes).
LCPP_MAX_STREAMS = 8


def model_path() -> str:
    """The GGUF every engine here runs: SWITCHYARD_MODEL_PATH, else the bundled one."""
    return EngineSettings().resolved_model_path()


def bench_threads() -> int:
    """The threads every engine here gets: the native engine's, from SWITCHYARD_ENGINE_THREADS."""
    return engine_threads(EngineSettings().engine_threads)


def chat_prompt(tok: Any, i: int) -> str:
    return str(tok.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" ({i})"}]))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- workers (each runs in its own process) ---------------------------------------------------
async def _one(eng: Any, rid: str, prompt: str, max_tokens: int) -> tuple[int, float | None]:
    n, ttft = 0, None
    async for c in eng.generate(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True)):
        n += len(c.token_ids)
        if c.finished and c.usage is not None:
            ttft = c.usage.ttft_s
    return n, ttft


async def worker_native(dtype: str, streams: list[int], max_tokens: int, device: str) -> dict[str, Any]:
    # `native@avx512`: a format with the native kernels held to an instruction-set class (kernel_isa).
    dtype, _, isa = dtype.partition("@")
    eng = create_engine(EngineSettings().apply(EngineConfig(dtype=dtype, device=device, kernel_isa=isa or "auto")))
    t = time.perf_counter()
    await eng.start()
    res: dict[str, Any] = {"load_s": time.perf_counter() - t, "dtype": getattr(eng, "dtype", dtype)}
    cal = getattr(eng, "calibration", None)
    if cal is not None:
        res["small_max_rows"] = cal.small_max_rows
        model = eng.runner.model  # type: ignore[attr-defined]
        res["decode_attention"] = "bf16 SDPA" if model.fused_decode else "fp32 matmuls"
    res.update(await measure_streams(eng, streams, max_tokens))
    await eng.stop()
    return res


async def measure_streams(eng: Any, streams: list[int], max_tokens: int) -> dict[str, Any]:
    """A started engine's TTFT, one stream's decode rate and the aggregate rate at each stream count
    (vllm_bench's vLLM worker measures with this too)."""
    res: dict[str, Any] = {}
    tok = eng.tokenizer
    await _one(eng, "warm", chat_prompt(tok, 0), 4)
    t = time.perf_counter()
    n, ttft = await _one(eng, "single", chat_prompt(tok, 1), max_tokens)
    el = time.perf_counter() - t
    res["ttft_s"] = ttft
    res["decode_tok_s"] = (n - 1) / (el - (ttft or 0))
    for s in streams:
        t = time.perf_counter()
        outs = await asyncio.gather(*(_one(eng, f"c{s}-{i}", chat_prompt(tok, i), max_tokens) for i in range(s)))
        res[f"agg_{s}"] = sum(o[0] for o in outs) / (time.perf_counter() - t)
    return res


async def worker_turns(dtype: str, turns: int, caching: bool, reps: int = 3) -> dict[str, Any]:
    """Median TTFT of each turn over `reps` growing conversations (distinct from their first
    message, so one conversation never reuses another's cache): a turn's TTFT is tens of
    milliseconds, and one scheduling hiccup would otherwise decide the ratio."""
    import statistics

    eng = create_engine(EngineSettings().apply(EngineConfig(dtype=dtype, enable_prefix_caching=caching)))
    await eng.start()
    tok = eng.tokenizer
    await _one(eng, "warm", chat_prompt(tok, 0), 4)
    per_turn: list[list[float]] = [[] for _ in range(turns)]
    prompt_tokens = 0
    for rep in range(reps):
        msgs: list[dict[str, str]] = []
        for t in range(turns):
            content = QUESTIONS[t % len(QUESTIONS)] + (f" (conversation {rep})" if t == 0 else "")
            msgs.append({"role": "user", "content": content})
            text = ""
            async for c in eng.generate(f"r{rep}t{t}", tok.apply_chat_template(msgs), SamplingParams(max_tokens=48)):
                text += c.text
                if c.finished and c.usage is not None:
                    per_turn[t].append(c.usage.ttft_s or 0.0)
                    prompt_tokens = c.usage.prompt_tokens
            msgs.append({"role": "assistant", "content": text})
    await eng.stop()
    return {"ttfts": [statistics.median(x) for x in per_turn], "last_prompt_tokens": prompt_tokens}


def worker_sweep(dtypes: list[str], batches: list[int], reps: int = 5) -> dict[str, Any]:
    """Best time of one decode step per weight format, formats interleaved so that load from
    other processes on a shared box hits all of them alike."""
    import torch

    from switchyard.libs.engine import native
    from switchyard.libs.engine.kernels import measure, row_invariance
    from switchyard.libs.engine.model import AttnBatch, KVCache, LlamaModel, measure_decode_attention
    from switchyard.libs.engine.weights import load_weights

    torch.set_num_threads(bench_threads())  # as every engine row above
    native.select_isa(EngineSettings().kernel_isa)
    cal = measure()
    models = {}
    for d in dtypes:
        cfg, w = load_weights(model_path(), d, os.path.join("var", "cache", "engine"))
        models[d] = LlamaModel(cfg, w, d).pack_cpu_weights()
        models[d].small_max_rows = cal.small_max_rows
    # Both depend on the CPU and the model's shapes, not on the weight format: measured once.
    invariance = row_invariance(models[dtypes[0]].matrix_shapes())
    fused_decode = measure_decode_attention(cfg)
    for m in models.values():
        m.invariance, m.fused_decode = invariance, fused_decode
    kvs = {d: KVCache(cfg, 64, 16, m.kv_dtype) for d, m in models.items()}
    ctx = 128
    out: dict[str, dict[int, float]] = {d: {} for d in dtypes}
    for b in batches:
        batch = AttnBatch(
            input_ids=torch.arange(b) + 100,
            positions=torch.full((b,), ctx - 1),
            slot_mapping=torch.full((b,), ctx - 1),
            num_decodes=b,
            decode_slots=torch.arange(ctx).repeat(b),
            decode_bias=torch.zeros(1, b, 1, ctx),
            prefills=[],
            logits_rows=torch.arange(b),
            free_rows=b,
        )
        for _ in range(reps):
            for d, m in models.items():
                t = time.perf_counter()
                m.forward(batch, kvs[d])
                el = time.perf_counter() - t
                out[d][b] = min(out[d].get(b, 1e9), el)
    return {"steps": out, "calibration_us": cal.us, "small_max_rows": cal.small_max_rows}


def worker_hf(streams: list[int], max_tokens: int) -> dict[str, Any]:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        return {"note": f"transformers not importable: {exc}"}
    torch.set_num_threads(bench_threads())  # as the native engine: same cores for everyone
    path = model_path()
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.padding_side = "left"
    if tok.pad_token is None:  # newer transformers read none from the GGUF, and refuse to pad without
        tok.pad_token = tok.eos_token
    ours = load_tokenizer(path)  # renders the same prompt strings as the native runs
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    res: dict[str, Any] = {}

    def gen(prompts: list[str], new: int) -> float:
        batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(**batch, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        return time.perf_counter() - t

    gen([chat_prompt(ours, 0)], 2)
    ttft = gen([chat_prompt(ours, 1)], 1)
    res["ttft_s"] = ttft
    res["decode_tok_s"] = (max_tokens - 1) / (gen([chat_prompt(ours, 1)], max_tokens) - ttft)
    for s in streams:
        res[f"agg_{s}"] = s * max_tokens / gen([chat_prompt(ours, i) for i in range(s)], max_tokens)
    return res


def worker_llama_cpp(streams: list[int], max_tokens: int) -> dict[str, Any]:
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {"note": "llama-cpp-python is not installed (`make bench` builds it when it can)"}
    threads = bench_threads()  # prompt too: its default, every core, spins against other load
    llm = Llama(model_path=model_path(), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    ours = load_tokenizer(model_path())

    def one(i: int) -> tuple[int, float, float]:
        t = time.perf_counter()
        first, n = None, 0
        for _ in llm(chat_prompt(ours, i), max_tokens=max_tokens, stream=True, temperature=0.0):
            n += 1
            first = first or time.perf_counter()
        end = time.perf_counter()
        return n, (first or end) - t, end - t

    one(0)
    n, ttft, el = one(1)
    res: dict[str, Any] = {"ttft_s": ttft, "decode_tok_s": (n - 1) / (el - ttft)}
    for s in streams:
        if s > LCPP_MAX_STREAMS:
            continue
        t = time.perf_counter()
        total = sum(one(i)[0] for i in range(s))  # one after another: it has no batching server
        res[f"agg_{s}"] = total / (time.perf_counter() - t)
    return res


def worker_llama_cpp_batched(streams: list[int], max_tokens: int) -> dict[str, Any]:
    """llama.cpp's own batched decode, as llama-server's continuous batching runs it: every
    sequence's prompt, then one `llama_decode` per step over a batch of one token per sequence,
    each with its own seq_id; greedy. agg_N counts generated tokens over the whole time, prompts
    included, like the engine rows."""
    try:
        import llama_cpp as lc  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {"note": "llama-cpp-python is not installed (`make bench` builds it when it can)"}
    path = model_path()
    ours = load_tokenizer(path)
    lc.llama_backend_init()
    load_model = getattr(lc, "llama_model_load_from_file", None) or lc.llama_load_model_from_file
    model = load_model(path.encode(), lc.llama_model_default_params())
    res: dict[str, Any] = {}
    for s in [n for n in streams if n > 1]:
        prompts = [ours.encode(chat_prompt(ours, i)) for i in range(s)]
        res[f"agg_{s}"], res[f"decode_only_{s}"] = _llama_cpp_batched_run(lc, model, prompts, max_tokens)
    return res


def _llama_cpp_batched_run(lc: Any, model: Any, prompts: list[list[int]], max_tokens: int) -> tuple[float, float]:
    """(tokens/s over the whole run, tokens/s of the decode steps alone) for len(prompts) sequences."""
    import numpy as np

    s, chunk = len(prompts), 512
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    cp = lc.llama_context_default_params()
    cp.n_ctx = (max(len(p) for p in prompts) + max_tokens + 8) * s
    cp.n_batch = cp.n_ubatch = max(chunk, s)
    cp.n_seq_max = s
    cp.n_threads = cp.n_threads_batch = bench_threads()
    new_ctx = getattr(lc, "llama_init_from_model", None) or lc.llama_new_context_with_model
    ctx = new_ctx(model, cp)
    batch = lc.llama_batch_init(max(chunk, s), 0, s)

    def decode(items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, seq_id, wants logits)."""
        batch.n_tokens = len(items)
        for i, (tok, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def argmax(i: int) -> int:
        return int(np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).argmax())

    t = time.perf_counter()
    last: list[int] = []
    for seq, ids in enumerate(prompts):  # each prompt in chunks of the batch size
        for a in range(0, len(ids), chunk):
            part = ids[a : a + chunk]
            decode([(tok, a + j, seq, a + j == len(ids) - 1) for j, tok in enumerate(part)])
        last.append(argmax((len(ids) - 1) % chunk))
    t_decode = time.perf_counter()
    for step in range(max_tokens - 1):
        decode([(last[q], len(prompts[q]) + step, q, True) for q in range(s)])
        last = [argmax(q) for q in range(s)]
    end = time.perf_counter()
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    return s * max_tokens / (end - t), s * (max_tokens - 1) / (end - t_decode)


def run_worker(args: argparse.Namespace) -> None:
    kind = args.worker
    if kind == "native":
        res = asyncio.run(worker_native(args.dtype, args.streams, args.max_tokens, args.device))
    elif kind == "turns":
        res = asyncio.run(worker_turns(args.dtype, args.turns, args.caching == "on"))
    elif kind == "sweep":
        res = worker_sweep(args.sweep_dtypes.split(","), [1, 8, 32])
    elif kind == "hf":
        res = worker_hf(args.streams, args.max_tokens)
    elif kind == "llama_cpp_batched":
        res = worker_llama_cpp_batched(args.streams, args.max_tokens)
    else:
        res = worker_llama_cpp(args.streams, args.max_tokens)
    res["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(res), flush=True)


def spawn(extra: list[str], common: list[str], pythonpath: str | None = None) -> dict[str, Any]:
    """Run one worker in a fresh process (`pythonpath` ahead of the others); its last RESULT line
    is the answer."""
    cmd = [sys.executable, os.path.abspath(__file__), *common, *extra]
    print("$", " ".join(extra), flush=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            res: dict[str, Any] = json.loads(line[7:])
            print("  ", {k: v for k, v in res.items() if k != "steps"}, flush=True)
            return res
    return {"note": f"worker failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"}


def best(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Merge two runs of one worker: the higher rate, the lower time, the higher peak RSS."""
    if old is None or "note" in old:
        return new
    if "note" in new:
        return old
    out = dict(old)
    # What a run found about itself (calibration) comes from the run that decoded faster.
    newer = new.get("decode_tok_s", 0) >= old.get("decode_tok_s", 0)
    for k, v in new.items():
        if k not in out or (k in ("small_max_rows", "decode_attention", "dtype") and newer):
            out[k] = v
        elif not isinstance(v, int | float | list):
            out[k] = v
        elif k == "ttfts":
            out[k] = [min(a, b) for a, b in zip(out[k], v, strict=True)]
        elif k.endswith("tok_s") or k.startswith("agg_") or k == "peak_rss_mb":
            out[k] = max(out[k], v)
        elif k.endswith("_s"):
            out[k] = min(out[k], v)
    return out


# -- report -----------------------------------------------------------------------------------
def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}{unit}" if v < 10 else f"{v:.1f}{unit}"
    return str(v)


def ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def render(args: argparse.Namespace, r: dict[str, Any]) -> str:
    s_cols = args.streams
    lines = [MARK_BEGIN, "### Engine benchmark", ""]
    if args.isa == "avx2":
        lines = [
            AVX2_BEGIN,
            "### Engine benchmark, AVX2 code paths on this CPU (`--isa avx2`)",
            "",
            "The AVX2 class measured on a newer CPU: every engine runs the code an AVX2-only CPU runs "
            f"(ours: {', '.join(f'{k}={v}' for k, v in AVX2_ENV.items())}; llama.cpp: a build without AVX-512, "
            f"`{args.llama_cpp_path or 'the installed one'}`). The clock, caches and memory are this CPU's, not an "
            "AVX2 machine's, so the ratios, not the rates, carry over. vLLM is not in it: its CPU build picks its "
            "kernels from the CPU's flags and cannot be held to AVX2.",
            "",
        ]
    lines += [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}; {bench_threads()} thread(s) for every engine; load average at start {r['load']}",
        f"- command: `python bench/engine_bench.py {' '.join(sys.argv[1:])}`",
        f"- model: {os.path.basename(model_path())}; {args.max_tokens} new tokens per stream, "
        f"EOS ignored, greedy; each engine in its own process, one after another; best of {args.rounds} rounds",
        "",
        "| engine | weights | load s | TTFT s | 1-stream decode tok/s | "
        + " | ".join(f"{s} streams tok/s" for s in s_cols)
        + " | peak RSS MiB |",
        "|---|---|---|---|---|" + "---|" * len(s_cols) + "---|",
    ]

    def row(name: str, weights: str, res: dict[str, Any]) -> None:
        if "note" in res:
            lines.append(f"| {name} | {weights} | {res['note']} |")
            return
        lines.append(
            f"| {name} | {weights} | {fmt(res.get('load_s'))} | {fmt(res.get('ttft_s'))} | "
            f"{fmt(res.get('decode_tok_s'))} | "
            + " | ".join(fmt(res.get(f"agg_{s}")) for s in s_cols)
            + f" | {fmt(res.get('peak_rss_mb'))} |"
        )

    for d in args.dtypes:
        res = r["native"][d]
        label = d
        if d == "auto" and "note" not in res:
            # The 4-bit crossover and the decode-attention choice only exist for the bf16 formats.
            hybrid = res.get("dtype") == "hybrid"
            extra = [f"4-bit ≤ {res.get('small_max_rows')} rows"] if hybrid else []
            if res.get("dtype") == "native":
                extra = ["switchyard/libs/engine/native kernels for every product"]
            if res.get("dtype") in ("hybrid", "bf16"):
                extra.append(f"decode attention: {res.get('decode_attention')}")
            label = f"auto → {res.get('dtype')}" + (f" ({'; '.join(extra)})" if extra else "")
        if "@" in d:
            form, isa = d.split("@", 1)
            label = f"{form}, kernels held to {isa} (`SWITCHYARD_KERNEL_ISA={isa}`" + (
                ": no AMX tiles)" if isa == "avx512" else ")"
            )
        row("native", label, res)
    if "vllm" in r:
        row("vLLM 0.32 CPU build (`vllm` engine kind)", "fp32 (HF checkpoint from the GGUF)", r["vllm"])
    row("transformers `generate` (batched)", "fp32", r["hf"])
    row("llama-cpp-python (sequential)", "GGUF Q4_1", r["lcpp"])
    row("llama.cpp batched decode (one llama_decode a step, a seq_id per stream)", "GGUF Q4_1", r["lcpp_batched"])
    lines += ["", _targets(args, r), ""]
    t_on, t_off = r["turns"].get("on", {}), r["turns"].get("off", {})
    if "ttfts" in t_on and "ttfts" in t_off:
        lines += [
            f"TTFT of turn 1 and turn {args.turns} of a growing conversation (per turn: median of 3 conversations, best round; "
            f"(48 new tokens per turn, weights {args.dtypes[0]}, last prompt {t_on['last_prompt_tokens']} tokens):",
            "",
            "| prefix caching | turn 1 TTFT s | last turn TTFT s | ratio |",
            "|---|---|---|---|",
        ]
        for k, t in (("on", t_on), ("off", t_off)):
            a, b = t["ttfts"][0], t["ttfts"][-1]
            lines.append(f"| {k} | {a:.3f} | {b:.3f} | {b / a:.2f}x |")
        lines.append("")
    sw = r.get("sweep")
    if sw and "steps" in sw:
        steps = sw["steps"]
        batches = sorted(int(b) for b in next(iter(steps.values())))
        lines += [
            "One decode step of the forward pass alone (128-token context, best of 5, formats "
            "interleaved), tokens/s in brackets:",
            "",
            "| weights | " + " | ".join(f"batch {b}" for b in batches) + " |",
            "|---|" + "---|" * len(batches),
        ]
        for d, per in steps.items():
            cells = [f"{per[str(b)] * 1000:.1f} ms ({b / per[str(b)]:.0f})" for b in batches]
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
        cal = sw["calibration_us"]
        lines += [
            "",
            "Kernel calibration (one 576→3072 product, µs; what `auto` measures at load):",
            "",
            "| kernel | " + " | ".join(f"{k} rows" for k in cal["fp32"]) + " |",
            "|---|" + "---|" * len(cal["fp32"]),
        ]
        for k, per in cal.items():
            lines.append(f"| {k} | " + " | ".join(f"{v:.0f}" for v in per.values()) + " |")
        lines.append("")
    lines += [AVX2_END if args.isa == "avx2" else MARK_END, ""]
    return "\n".join(lines)


def _targets(args: argparse.Namespace, r: dict[str, Any]) -> str:
    nat = r["native"][args.dtypes[0]]
    hf, lcpp, batched = r["hf"], r["lcpp"], r.get("lcpp_batched", {})
    t_on = r["turns"].get("on", {}).get("ttfts")
    big = 32 if 32 in args.streams else max(args.streams)
    agg = nat.get(f"agg_{big}")
    # Issue 21's peer at many streams is the better of llama.cpp's batched decode and vLLM's CPU build.
    peers = [v for v in (batched.get(f"agg_{big}"), r.get("vllm", {}).get(f"agg_{big}")) if isinstance(v, int | float)]
    rows = [
        (
            "single-stream decode vs llama-cpp-python",
            ratio(nat.get("decode_tok_s"), lcpp.get("decode_tok_s")),
            "≥ 1.0x",
            1.0,
        ),
        (f"{big} streams vs llama-cpp-python single stream", ratio(agg, lcpp.get("decode_tok_s")), "≥ 4x", 4.0),
        (f"{big} streams vs transformers at {big}", ratio(agg, hf.get(f"agg_{big}")), "≥ 2x", 2.0),
        (
            f"{big} streams vs the better of llama.cpp's batched decode and vLLM at {big}",
            ratio(agg, max(peers) if peers else None),
            "≥ 1.2x",
            1.2,
        ),
    ]
    # Memory is judged the other way round: at most 1.5x llama.cpp's peak.
    mem = ratio(nat.get("peak_rss_mb"), lcpp.get("peak_rss_mb"))
    out = [
        f"Targets (native `{args.dtypes[0]}` against the baselines of this run):",
        "",
        "| target | measured | wanted | met |",
        "|---|---|---|---|",
    ]
    for name, v, want, bound in rows:
        out.append(f"| {name} | {fmt(v, 'x')} | {want} | {'-' if v is None else ('yes' if v >= bound else 'no')} |")
    out.append(
        f"| peak memory vs llama-cpp-python | {fmt(mem, 'x')} | ≤ 1.5x | {'-' if mem is None else ('yes' if mem <= 1.5 else 'no')} |"
    )
    if t_on:
        v = t_on[-1] / t_on[0]
        out.append(
            f"| turn-{args.turns} TTFT vs turn 1, prefix caching on | {v:.2f}x | ≤ 1.5x | {'yes' if v <= 1.5 else 'no'} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument(
        "--dtypes", default="auto,fp32,bf16,int8,native", help="native weight formats; the first is the one judged"
    )
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="one format, 1 and 8 streams, 16 tokens")
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="skip the per-format decode-step table")
    ap.add_argument("--rounds", type=int, default=2, help="run every engine this many times; keep the best")
    ap.add_argument("--isa", choices=["auto", "avx2"], default="auto", help="avx2: hold every engine to AVX2 code")
    ap.add_argument("--llama-cpp-path", help="a directory holding another llama_cpp build, put first on its path")
    ap.add_argument(
        "--worker", choices=["native", "turns", "sweep", "hf", "llama_cpp", "llama_cpp_batched"], help=argparse.SUPPRESS
    )
    ap.add_argument("--dtype", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--caching", default="on", help=argparse.SUPPRESS)
    ap.add_argument("--sweep-dtypes", default="fp32,bf16,int8,hybrid,native", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.dtypes, args.streams, args.max_tokens, args.turns, args.rounds = "auto", "1,8", 16, 4, 1
    args.dtypes = args.dtypes.split(",")
    args.streams = [int(s) for s in args.streams.split(",")]
    if args.worker:
        run_worker(args)
        return
    # The engine alone on the machine: every engine gets every core unless told otherwise (the
    # inference service leaves one core to the rest of the pipeline: cores - 1).
    os.environ.setdefault("SWITCHYARD_ENGINE_THREADS", str(os.cpu_count() or 1))
    if args.isa == "avx2":
        os.environ.update(AVX2_ENV)
    lpath = args.llama_cpp_path
    common = ["--streams", ",".join(map(str, args.streams)), "--max-tokens", str(args.max_tokens)]
    common += ["--turns", str(args.turns), "--device", args.device]
    r: dict[str, Any] = {"load": f"{os.getloadavg()[0]:.2f}", "native": {}, "turns": {}}
    skipped = {"note": "skipped (--no-baselines)"}
    # Rounds, each running every engine once, and the best figure of each: on a shared box a
    # burst of load from elsewhere can halve one run, and it must not decide a ratio.
    for _ in range(args.rounds):
        for d in args.dtypes:
            r["native"][d] = best(r["native"].get(d), spawn(["--worker", "native", "--dtype", d], common))
        for caching in ("on", "off"):
            extra = ["--worker", "turns", "--dtype", args.dtypes[0], "--caching", caching]
            r["turns"][caching] = best(r["turns"].get(caching), spawn(extra, common))
        r["hf"] = skipped if args.no_baselines else best(r.get("hf"), spawn(["--worker", "hf"], common))
        r["lcpp"] = (
            skipped if args.no_baselines else best(r.get("lcpp"), spawn(["--worker", "llama_cpp"], common, lpath))
        )
        from bench.vllm_bench import spawn_vllm, vllm_python

        vpy = vllm_python()
        # vLLM's CPU build picks its kernels from the CPU's flags: it cannot be held to AVX2.
        if vpy is not None and not args.no_baselines and args.isa == "auto":
            r["vllm"] = best(r.get("vllm"), spawn_vllm(vpy, ",".join(map(str, args.streams)), args.max_tokens))
        batched = ["--worker", "llama_cpp_batched"]
        r["lcpp_batched"] = skipped if args.no_baselines else best(r.get("lcpp_batched"), spawn(batched, common, lpath))
    if not args.quick and not args.no_sweep:
        r["sweep"] = spawn(["--worker", "sweep"], common)
    section = render(args, r)
    if args.isa == "avx2":
        write_section(args.out, AVX2_BEGIN, AVX2_END, section)
    else:
        write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)


if __name__ == "__main__":
    main()
