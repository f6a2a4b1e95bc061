"""Pipeline benchmark: the whole stack over HTTP as a client sees it, against the engine alone, in one run.

    python -m bench.pipeline_bench --out docs/benchmarks.md [--levels 1,8,32,64] [--tokens 64] [--requests N]

Starts the stack as `make run` does (switchyard.cli.stack.Stack: nats-server and every service in its own
process) and drives `/v1/chat/completions` with streamed requests (distinct prompts, greedy, a fixed
output length with EOS ignored) from one httpx.AsyncClient, `level` streams open at every moment.
Per request: the client's TTFT (request sent → first content delta), the engine's own TTFT and TPOT
(the request's record), the gaps between deltas and deltas per token; the spans say where the time
before the first byte went. Before the stack starts, the engine alone runs in a fresh process (the
inference service's settings, threads and concurrency, the prompts the context stage renders for the
same texts) at the same levels, so the pipeline's cost is a ratio measured side by side; the weight
format it resolves `auto` to is pinned for the stack. With --vllm (on where the vLLM virtualenv is,
`make setup-vllm`) the same load then runs against vLLM as a peer: vLLM alone (this file's engine
worker, run by that environment's python) and the same stack with its inference replica run from that
environment (`SWITCHYARD_INFERENCE_ENGINE=vllm`, eager unless --vllm-compile), rendered beside the
native stack's rows with ratios of the same run. The result is a markdown section in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.engine_bench import QUESTIONS
from bench.pipeline_client import Sample, drive_level, fetch_records, stream_one
from bench.pipeline_report import MARK_BEGIN, MARK_END, render, summarize
from bench.report import write_section

ROOT = Path(__file__).resolve().parents[1]


def requests_for(level: int, requested: int | None) -> int:
    return max(level, requested if requested else max(8, 2 * level))


def plan(args: argparse.Namespace) -> list[tuple[int, list[str]]]:
    """The user texts of every level: distinct across the whole run, so no request reuses another's answer."""
    out, n = [], 0
    for level in args.levels:
        count = requests_for(level, args.requests)
        out.append((level, [f"{QUESTIONS[(n + i) % len(QUESTIONS)]} (request {n + i})" for i in range(count)]))
        n += count
    return out


# -- the stack over HTTP ----------------------------------------------------------------------
def vllm_env(eager: bool) -> dict[str, str]:
    """A vLLM replica: the inference service's vllm engine kind, run by the vLLM virtualenv's python,
    which has our dependencies but not our package (PYTHONPATH at this checkout)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "SWITCHYARD_INFERENCE_ENGINE": "vllm",
        "SWITCHYARD_VLLM_ENFORCE_EAGER": "1" if eager else "0",
        "PYTHONPATH": path,
    }


def stack_env(dtype: str | None = None) -> dict[str, str]:
    """The stack as `make run` starts it, with the dev key's limits out of the way: the limiter still
    runs (its cost is the pipeline's), but 64 streams must not be refused. `dtype` pins the weight
    format the engine alone resolved `auto` to, so both run the same weights."""
    tier = {"requests_per_minute": 1e6, "tokens_per_minute": 1e9, "concurrent_streams": 4096}
    pinned = {"SWITCHYARD_INFERENCE_DTYPE": dtype} if dtype and "SWITCHYARD_INFERENCE_DTYPE" not in os.environ else {}
    return {
        **pinned,
        "SWITCHYARD_INFERENCE_CACHE_DIR": os.environ.get(
            "SWITCHYARD_INFERENCE_CACHE_DIR", str(ROOT / "var/cache/engine")
        ),
        "SWITCHYARD_GATEWAY_TIERS": json.dumps({"free": tier, "pro": tier}),
        "SWITCHYARD_GATEWAY_REQUEST_TIMEOUT_S": "900",
    }


async def drive(
    url: str, api_key: str, admin_key: str, args: argparse.Namespace, texts: list[tuple[int, list[str]]]
) -> dict[int, list[Sample]]:
    biggest = max(args.levels)
    limits = httpx.Limits(max_connections=biggest + 16, max_keepalive_connections=biggest + 16)
    timeout = httpx.Timeout(900.0, connect=10.0)
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, limits=limits) as client:
        models = (await client.get("/v1/models")).json()["data"]
        model = f"{models[0]['id']}:fast"  # one phase: the output length is the asked one
        for i in range(2):  # first requests pay one-time costs (connections, caches, lazy loads)
            await stream_one(client, model, f"Say hello. (warm-up {i})", 8)
        out: dict[int, list[Sample]] = {}
        for level, level_texts in texts:
            t = time.perf_counter()
            out[level] = await drive_level(client, model, level_texts, level, args.tokens)
            print(f"  {level} streams: {len(level_texts)} requests in {time.perf_counter() - t:.1f}s", flush=True)
            await fetch_records(client, admin_key, out[level])
        return out


def run_stack(
    args: argparse.Namespace, texts: list[tuple[int, list[str]]], dtype: str | None, vllm: str | None = None
) -> tuple[dict[int, list[Sample]], float | None]:
    """Each level's samples, and the seconds the stack took to be ready (None for a running one).
    `vllm`: the python its inference replica runs with (the vLLM virtualenv's), else a native replica."""
    if args.url:
        return asyncio.run(drive(args.url, args.api_key, args.admin_key, args, texts)), None
    from switchyard.cli.stack import Stack
    from switchyard.libs.bus.embedded import free_port

    data = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    env = {**stack_env(dtype), **(vllm_env(args.vllm_eager) if vllm else {})}
    stack = Stack(data_dir=data, port=free_port(), env=env, interpreters={"inference": vllm} if vllm else {})
    print(f"starting the stack{' on a vLLM replica' if vllm else ''} (logs in {data}/logs) ...", flush=True)
    try:
        t = time.perf_counter()
        stack.start(timeout_s=900)
        ready = time.perf_counter() - t
        print(f"  ready in {ready:.0f}s", flush=True)
        return asyncio.run(drive(stack.url, stack.api_key, stack.admin_key, args, texts)), ready
    finally:
        stack.stop()


# -- the engine alone -------------------------------------------------------------------------
async def engine_alone(job: dict[str, Any]) -> dict[str, Any]:
    """The inference service's engine, built as its setup builds it from the same settings, fed the
    prompts the context stage renders for these texts (checked against the records afterwards)."""
    from switchyard.libs.engine import SamplingParams, create_engine
    from switchyard.libs.engine.threads import engine_threads
    from switchyard.services.inference.settings import InferenceSettings

    s = InferenceSettings()
    config = s.engine_config()
    eng = create_engine(config)
    t = time.perf_counter()
    await eng.start()
    load_s = time.perf_counter() - t
    tokens = job["tokens"]

    async def one(rid: str, prompt: str, n_tokens: int) -> tuple[int, float | None, float | None]:
        n, ttft, tpot = 0, None, None
        params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
        async for c in eng.generate(rid, prompt, params):
            n += len(c.token_ids)
            if c.finished and c.usage is not None:
                ttft, tpot = c.usage.ttft_s, c.usage.tpot_s
        return n, ttft, tpot

    for i in range(2):
        await one(f"warm{i}", job["warm"], 8)
    res: dict[str, Any] = {
        "kind": config.kind,
        "threads": engine_threads(config.threads),
        "dtype": getattr(eng, "dtype", s.dtype),
        "load_s": load_s,
        "levels": {},
    }
    if config.kind == "vllm":  # vLLM binds its own threads; its weights are the fp32 (or bf16) checkpoint
        import vllm

        res.update(threads="vLLM's own binding", dtype=getattr(config, "vllm_dtype", "-"), version=vllm.__version__)
    for level, prompts in job["levels"]:
        todo = iter(enumerate(prompts))
        outs: list[tuple[int, float | None, float | None]] = []

        async def worker(level: int = level, todo: Any = todo, outs: Any = outs) -> None:
            for i, p in todo:
                outs.append(await one(f"l{level}-{i}", p, tokens))

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(level)))
        wall = time.perf_counter() - t
        res["levels"][str(level)] = {
            "tok_s": sum(o[0] for o in outs) / wall,
            "ttft_ms": [o[1] * 1000 for o in outs if o[1] is not None],
            "tpot_ms": [o[2] * 1000 for o in outs if o[2] is not None],
        }
        print(f"  engine alone, {level} streams: {res['levels'][str(level)]['tok_s']:.1f} tok/s", flush=True)
    await eng.stop()
    return res


@functools.cache
def _tokenizer() -> Any:
    from switchyard.libs.tokenizer import TokenizerSettings, load_tokenizer

    return load_tokenizer(TokenizerSettings().resolved_model_path())


def render_prompt(text: str) -> str:
    """The prompt the context stage renders for a new conversation's first message (no tenant
    instructions, memory or tools in the benchmark's stack)."""
    return str(_tokenizer().apply_chat_template([{"role": "user", "content": text}]))


def spawn_engine(
    texts: list[tuple[int, list[str]]], args: argparse.Namespace, vllm: str | None = None
) -> dict[str, Any]:
    """The engine alone in a fresh process (its own threads and caches), with the stack's environment;
    `vllm`: vLLM alone, the worker run by that python with a vLLM replica's environment."""
    job = {
        "tokens": args.tokens,
        "warm": render_prompt("Say hello. (warm-up)"),
        "levels": [[level, [render_prompt(t) for t in level_texts]] for level, level_texts in texts],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(job, fh)
    load = os.getloadavg()[0]
    print(f"{'vLLM' if vllm else 'engine'} alone ...", flush=True)
    t = time.perf_counter()
    env = {**os.environ, **stack_env(), **(vllm_env(args.vllm_eager) if vllm else {}), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [vllm or sys.executable, "-m", "bench.pipeline_bench", "--worker", fh.name],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    os.unlink(fh.name)
    print(f"  done in {time.perf_counter() - t:.0f}s", flush=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return {**result, "load": f"{load:.2f}"}
    return {"note": f"engine worker failed (exit {proc.returncode})", "levels": {}}


def vllm_wanted(args: argparse.Namespace) -> str | None:
    """The vLLM virtualenv's python when the vLLM peer runs: asked for, or by default where it is installed;
    never against a stack started elsewhere (--url), whose replicas are its own."""
    from bench.vllm_bench import vllm_python

    if args.vllm is False or args.url:
        return None
    python = vllm_python()
    if python is None and args.vllm:
        raise SystemExit("--vllm: no vLLM environment (make setup-vllm, or set VLLM_VENV)")
    return python


def run_vllm(args: argparse.Namespace, texts: list[tuple[int, list[str]]], python: str) -> dict[str, Any]:
    """vLLM alone, then the stack on a vLLM replica; a failure is a note in the section, not a lost run."""
    engine: dict[str, Any] = {"note": "skipped (--no-engine)", "levels": {}}
    if not args.no_engine:
        engine = spawn_engine(texts, args, vllm=python)
    out: dict[str, Any] = {"load": f"{os.getloadavg()[0]:.2f}", "eager": args.vllm_eager}
    try:
        samples, out["ready_s"] = run_stack(args, texts, None, vllm=python)
    except (RuntimeError, TimeoutError, OSError) as e:
        return {**out, "note": f"the stack on a vLLM replica failed: {e}", "engine": engine}
    return {**out, **summarize(samples, engine)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/benchmarks.md", help="markdown file to write the section into; '' for none")
    ap.add_argument("--levels", default="1,8,32,64", help="concurrent streams, comma-separated")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request (EOS ignored)")
    ap.add_argument("--requests", type=int, default=None, help="requests per level (default max(8, 2 x level))")
    ap.add_argument("--json", default=None, help="also write the summary as JSON here")
    ap.add_argument("--no-engine", action="store_true", help="skip the engine-alone comparison")
    ap.add_argument(
        "--vllm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the same load on a stack whose inference replica is vLLM (default: where `make setup-vllm` "
        "made its virtualenv, VLLM_VENV)",
    )
    ap.add_argument(
        "--vllm-compile",
        dest="vllm_eager",
        action="store_false",
        help="let vLLM compile at start-up (minutes on 2 cores) instead of running eager",
    )
    ap.add_argument("--url", default=None, help="drive a running stack instead of starting one")
    ap.add_argument("--api-key", default=os.environ.get("SWITCHYARD_API_KEY", ""))
    ap.add_argument("--admin-key", default=os.environ.get("SWITCHYARD_ADMIN_KEY", ""))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--engine",
        default="native",
        help="native (this benchmark) or sim: the stack at GPU token rates, each stage's CPU per token and per "
        "request (bench/stage_bench.py, whose own options follow)",
    )
    args, rest = ap.parse_known_args(argv)
    if args.engine != "native":
        from bench.stage_bench import main as stage_main

        return stage_main(["--engine", args.engine, "--out", args.out, *rest])
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.worker:
        with open(args.worker) as fh:
            res = asyncio.run(engine_alone(json.load(fh)))
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    args.levels = [int(x) for x in args.levels.split(",")]
    texts = plan(args)
    # The engine alone first: it resolves the weight format `auto` picks here, and the stack then runs that one.
    engine: dict[str, Any] = {"note": "skipped (--no-engine)", "levels": {}}
    if not args.no_engine:
        engine = spawn_engine(texts, args)
    r: dict[str, Any] = {"load": f"{os.getloadavg()[0]:.2f}"}
    dtype = engine.get("dtype")
    samples, r["ready_s"] = run_stack(args, texts, dtype if isinstance(dtype, str) else None)
    r.update(summarize(samples, engine))
    recorded = [s for ss in samples.values() for s in ss if s.record.get("prompt")]
    r["prompts_differing"] = sum(s.record["prompt"] != render_prompt(s.text) for s in recorded)
    vllm = vllm_wanted(args)
    if vllm:
        r["vllm"] = run_vllm(args, texts, vllm)
    section = render(args.tokens, r)
    if args.out:
        write_section(args.out, MARK_BEGIN, MARK_END, section)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
