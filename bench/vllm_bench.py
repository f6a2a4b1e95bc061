"""vLLM against the native engine, in one run: the engine benchmark's streams, its prompts, its rules.

    python bench/vllm_bench.py --out docs/benchmarks.md [--rounds 2] [--streams 1,8,32,64]

Each engine runs in its own worker process, rounds interleaved, best figure of each kept (as
bench/engine_bench.py does): the native engine's worker is engine_bench's own, with this python;
vLLM's worker is this file run by the vLLM virtualenv's python (`make setup-vllm`, VLLM_VENV). The
result is a markdown section written into --out between its own markers, with vLLM's figures as
ratios of the native engine's measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import resource
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.engine_bench import bench_threads, best, fmt, measure_streams, ratio, spawn
from bench.report import machine, write_section
from switchyard.libs.engine import EngineSettings, create_engine

MARK_BEGIN = "<!-- vllm_bench:begin -->"
MARK_END = "<!-- vllm_bench:end -->"
ENGINE_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_bench.py")


def vllm_python() -> str | None:
    """The vLLM virtualenv's python (`make setup-vllm`), or None where there is none."""
    venv = os.environ.get("VLLM_VENV") or os.path.join(os.path.expanduser("~"), ".cache", "switchyard", "vllm-venv")
    py = os.path.join(venv, "bin", "python")
    return py if os.path.exists(py) else None


async def worker_vllm(streams: list[int], max_tokens: int, eager: bool) -> dict[str, Any]:
    """The vllm engine kind as the inference service builds it: fp32, prefix caching on, room for
    the largest stream count; vLLM binds its own threads to the cores."""
    from switchyard.libs.engine.vllm_engine import VllmEngineConfig

    settings = EngineSettings()
    base = VllmEngineConfig(
        max_num_seqs=max(streams), enforce_eager=eager, cache_dir=os.path.join("var", "cache", "engine")
    )
    eng = create_engine(settings.vllm_config(settings.apply(base)))
    t = time.perf_counter()
    await eng.start()
    res: dict[str, Any] = {"load_s": time.perf_counter() - t}
    res.update(await measure_streams(eng, streams, max_tokens))
    await eng.stop()
    # The engine core is a child process: its peak is the one that counts.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res["peak_rss_mb"] = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return res


def spawn_vllm(python: str, streams: str, max_tokens: int, eager: bool = False) -> dict[str, Any]:
    """Run the vLLM worker with the vLLM virtualenv's python (engine_bench's peer row uses it too)."""
    import subprocess

    cmd = [python, os.path.abspath(__file__), "--worker", "--streams", streams, "--max-tokens", str(max_tokens)]
    cmd += ["--eager"] if eager else []
    print("$ vllm worker", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            res: dict[str, Any] = json.loads(line[7:])
            print("  ", res, flush=True)
            return res
    return {"note": f"worker failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"}


def render(
    args: argparse.Namespace, streams: list[int], load: str, native: dict[str, Any], vllm: dict[str, Any]
) -> str:
    cols = ["decode_tok_s", *(f"agg_{s}" for s in streams)]
    heads = ["1-stream decode tok/s", *(f"{s} streams tok/s" for s in streams)]
    lines = [
        MARK_BEGIN,
        "### vLLM against the native engine",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}; load average at start {load} (other jobs were running: read the ratios)",
        f"- command: `python bench/vllm_bench.py {' '.join(sys.argv[1:])}` (vLLM's worker runs in its own "
        "virtualenv, `make setup-vllm`)",
        f"- model: {os.path.basename(EngineSettings().resolved_model_path())}; {args.max_tokens} new tokens per stream, EOS ignored, "
        f"greedy; engine_bench's prompts; each engine in its own process, rounds interleaved, best of {args.rounds}",
        f"- native: weights `{args.dtype}`, {bench_threads()} thread(s); vLLM 0.32.0 CPU build: fp32 (the HF "
        f"checkpoint written from the GGUF), prefix caching on, {'eager' if args.eager else 'compiled'}, "
        "its own core binding",
        "",
        "| engine | load s | TTFT s | " + " | ".join(heads) + " | peak RSS MiB |",
        "|---|---|---|" + "---|" * len(heads) + "---|",
    ]
    label = f"native `{args.dtype}`" + (
        f" → {native['dtype']}" if native.get("dtype") not in (None, args.dtype) else ""
    )
    for name, res in ((label, native), ("vLLM (`vllm` engine kind)", vllm)):
        if "note" in res:
            lines.append(f"| {name} | {res['note']} |")
            continue
        lines.append(
            f"| {name} | {fmt(res.get('load_s'))} | {fmt(res.get('ttft_s'))} | "
            + " | ".join(fmt(res.get(c)) for c in cols)
            + f" | {fmt(res.get('peak_rss_mb'))} |"
        )
    lines.append(
        "| **vLLM / native** | - | "
        + fmt(ratio(vllm.get("ttft_s"), native.get("ttft_s")), "x")
        + " | "
        + " | ".join(fmt(ratio(vllm.get(c), native.get(c)), "x") for c in cols)
        + " | - |"
    )
    lines += ["", MARK_END, ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="auto", help="the native engine's weight format")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--eager", action="store_true", help="vLLM without its start-up compile")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    if args.worker:
        res = asyncio.run(worker_vllm(streams, args.max_tokens, args.eager))
        print("RESULT " + json.dumps(res), flush=True)
        return
    python = vllm_python()
    if python is None:
        raise SystemExit("no vLLM environment: make setup-vllm (or set VLLM_VENV)")
    os.environ.setdefault("SWITCHYARD_ENGINE_THREADS", str(os.cpu_count() or 1))  # as engine_bench
    load = f"{os.getloadavg()[0]:.2f}"
    common = ["--streams", args.streams, "--max-tokens", str(args.max_tokens)]
    native: dict[str, Any] | None = None
    vllm: dict[str, Any] | None = None
    for _ in range(args.rounds):
        native = best(native, spawn(["--worker", "native", "--dtype", args.dtype], common))
        vllm = best(vllm, spawn_vllm(python, args.streams, args.max_tokens, args.eager))
    assert native is not None and vllm is not None
    section = render(args, streams, load, native, vllm)
    write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)


if __name__ == "__main__":
    main()
