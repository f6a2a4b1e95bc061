"""Model families: the native engine against llama-cpp-python on each family's Q8_0 GGUF.

    python bench/family_bench.py --out docs/benchmarks.md [--families qwen2,qwen3,phi3,llama3]
        [--tokens 64] [--streams 1,32] [--rounds 2] [--threads 1]

Each family's checkpoint is written by transformers (tests/hf_models.py `write_checkpoint`, random
weights) at SmolLM2-135M's shape and converted to Q8_0 by llama.cpp's own convert_hf_to_gguf.py,
with tests/engine/make_family_reference.py's workarounds; the GGUFs are cached under CACHE, outside
the checkout (about 150 MB each). The converter comes from llama-cpp-python's sdist, downloaded and
unpacked there when no --llama-cpp-dir is given.

Token ids in and out (seeded prompts), so no tokenizer is timed. Every figure is decode alone: one
stream's tok/s and TPOT, and at N streams the tokens of the steps after every prompt has its first
token (llama.cpp: engine_bench's batched run, one `llama_decode` a step over one token per
sequence). Each point is one worker process per engine, the two engines alternated point by point
(and their order swapped every round), so a burst of load from elsewhere hits both alike; the best
round counts. The table goes between this benchmark's markers for the CPU class of this machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import cpu_info, machine, write_section

FAMILIES = ("qwen2", "qwen3", "phi3", "llama3")
# What each family adds to Llama (switchyard/libs/engine/README.md): the row's second column.
ADDS = {
    "qwen2": "q/k/v biases",
    "qwen3": "QK-norm, head_dim 64",
    "phi3": "fused QKV and gate-up",
    "llama3": "Llama 3 RoPE scaling",
}
# SmolLM2-135M's shape; its vocabulary (49152 tokens) comes with the tokenizer write_checkpoint saves.
SHAPE: dict[str, Any] = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
}
VOCAB = 49152
# tests/hf_models.py gives Qwen 3 a head_dim apart from hidden / heads; here it is SmolLM2's 64.
EXTRA: dict[str, dict[str, Any]] = {"qwen3": {"head_dim": 64}}
LLAMA_CPP_VERSION = "0.3.36"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "switchyard", "family-bench")
PROMPT_TOKENS = 32
# Past SmolLM2's special tokens (ids 0-16), as make_family_reference's prompts.
FIRST_ID = 17
# CPU classes, widest first, as bench/report.py orders them: (flag, marker key, the page's heading).
CLASSES = (("amx_tile", "amx", "AMX"), ("avx512f", "avx512", "AVX-512"), ("avx2", "avx2", "AVX2"))


def overrides(family: str) -> dict[str, Any]:
    """The config fields write_checkpoint is given for `family` on top of its own."""
    return {**SHAPE, **EXTRA.get(family, {})}


def cpu_class(flags: frozenset[str] | None = None) -> tuple[str, str]:
    """(marker key, heading name) of this CPU's class, e.g. ("avx512", "AVX-512")."""
    flags = cpu_info()[1] if flags is None else flags
    for flag, key, name in CLASSES:
        if flag in flags:
            return key, name
    return "other", "Other CPU"


def markers(key: str) -> tuple[str, str]:
    return f"<!-- family_bench:{key}:begin -->", f"<!-- family_bench:{key}:end -->"


# -- the GGUFs ------------------------------------------------------------------------------------
def gguf_path(family: str, cache: str = CACHE) -> str:
    """The cached file; its name carries a hash of the overrides, so a changed shape is rebuilt."""
    key = json.dumps([family, overrides(family), LLAMA_CPP_VERSION], sort_keys=True)
    return os.path.join(cache, f"{family}-q8_0-{hashlib.sha1(key.encode()).hexdigest()[:10]}.gguf")


def ensure_converter(cache: str = CACHE) -> str:
    """llama.cpp's directory from llama-cpp-python's sdist, downloaded and unpacked under `cache` once."""
    root = os.path.join(cache, f"llama_cpp_python-{LLAMA_CPP_VERSION}")
    src = os.path.join(root, "vendor", "llama.cpp")
    if os.path.exists(os.path.join(src, "convert_hf_to_gguf.py")):
        return src
    os.makedirs(cache, exist_ok=True)
    print(f"fetching llama.cpp's converter (llama-cpp-python {LLAMA_CPP_VERSION} sdist) ...", flush=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", "-d", tmp]
        subprocess.run([*pip, f"llama-cpp-python=={LLAMA_CPP_VERSION}"], check=True)
        (sdist,) = glob.glob(os.path.join(tmp, "*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(os.path.join(tmp, os.path.basename(root)), root)
    return src


def ensure_sentencepiece(cache: str = CACHE) -> None:
    """The converter imports sentencepiece, which is no dependency of ours: installed under `cache`
    and put on PYTHONPATH, which make_family_reference.convert hands to the converter."""
    if importlib.util.find_spec("sentencepiece") is not None:
        return
    target = os.path.join(cache, "convdeps")
    if not os.path.isdir(os.path.join(target, "sentencepiece")):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", target, "sentencepiece"], check=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (target, os.environ.get("PYTHONPATH", "")) if p)


def build_gguf(family: str, llama_cpp_dir: str, out: str, **config: Any) -> str:
    """`family`'s random checkpoint (`config` on top of the family's own) as a Q8_0 GGUF at `out`."""
    from tests.engine.make_family_reference import convert, shrink_vocab
    from tests.hf_models import write_checkpoint

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out) or ".") as tmp:
        checkpoint = write_checkpoint(os.path.join(tmp, family), family, **config)
        full = os.path.join(tmp, "converted.gguf")
        convert(llama_cpp_dir, str(checkpoint), family, "q8_0", full)
        # Keeping every token: the rewrite only renames the model, so that llama.cpp applies no
        # named model's vocabulary rules (Phi-3's want a "</s>" SmolLM2's vocabulary lacks).
        from gguf import GGUFReader

        vocab = len(GGUFReader(full, "r").fields["tokenizer.ggml.tokens"].contents())
        shrink_vocab(full, out + ".tmp", vocab)
        os.replace(out + ".tmp", out)
    return out


def ensure_ggufs(families: list[str], llama_cpp_dir: str | None, cache: str = CACHE) -> dict[str, str]:
    paths = {f: gguf_path(f, cache) for f in families}
    missing = [f for f, p in paths.items() if not os.path.exists(p)]
    if missing:
        src = llama_cpp_dir or ensure_converter(cache)
        ensure_sentencepiece(cache)
        for f in missing:
            t = time.perf_counter()
            build_gguf(f, src, paths[f], **overrides(f))
            print(f"built {paths[f]} in {time.perf_counter() - t:.0f} s", flush=True)
    return paths


# -- workers (each in its own process) -----------------------------------------------------------
def prompts(n: int, vocab: int) -> list[list[int]]:
    """n seeded prompts of PROMPT_TOKENS ids: the same for both engines (same vocabulary)."""
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.integers(FIRST_ID, vocab, PROMPT_TOKENS).tolist() for _ in range(n)]


def worker_native(path: str, threads: int, tokens: int, streams: int) -> dict[str, Any]:
    import torch

    from switchyard.libs.engine import native
    from switchyard.libs.engine.engine import NativeEngine
    from switchyard.libs.engine.model import DecoderModel
    from switchyard.libs.engine.types import EngineConfig
    from switchyard.libs.engine.weights import load_weights
    from tests.engine.helpers import drive, make_request

    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)  # as the engine's step loop
    native.select_isa("auto")
    t = time.perf_counter()
    cfg, tensors = load_weights(path, "native", os.path.join(CACHE, "engine"))
    model = DecoderModel(cfg, tensors, "native").pack_cpu_weights()
    # The engine's tokenizer (the bundled SmolLM2's, the same vocabulary) is unused: ids in and out.
    per_stream = -(-(PROMPT_TOKENS + tokens + 16) // 16)  # blocks of 16 tokens
    eng = NativeEngine(EngineConfig(dtype="native", num_blocks=(streams + 1) * per_stream, max_num_seqs=streams))
    eng.build_with_model(model)
    res: dict[str, Any] = {"load_s": time.perf_counter() - t}

    def run(ps: list[list[int]], n: int, tag: str) -> tuple[int, float]:
        """(tokens, seconds) of the steps after every request has its first token."""
        reqs = [make_request(f"{tag}{i}", p, max_tokens=n, ignore_eos=True) for i, p in enumerate(ps)]
        mark: list[float] = []
        counted: list[int] = []

        def on_step(_: int) -> None:
            if not mark and all(r.output_ids for r in reqs):
                mark.append(time.perf_counter())
                counted.append(sum(len(r.output_ids) for r in reqs))

        drive(eng, reqs, on_step=on_step)
        end = time.perf_counter()
        return sum(len(r.output_ids) for r in reqs) - counted[0], end - mark[0]

    ps = prompts(streams + 1, cfg.vocab_size)
    run(ps[-1:], 4, "warm")
    n, el = run(ps[:streams], tokens, "run")
    res["tok_s"] = n / el
    return res


def worker_llama_cpp(path: str, threads: int, tokens: int, streams: int) -> dict[str, Any]:
    import llama_cpp as lc

    if streams > 1:
        # engine_bench's batched run: every prompt, then one llama_decode a step for all sequences.
        os.environ["SWITCHYARD_ENGINE_THREADS"] = str(threads)  # the threads that run gives llama.cpp
        from bench.engine_bench import _llama_cpp_batched_run

        lc.llama_backend_init()
        load_model = getattr(lc, "llama_model_load_from_file", None) or lc.llama_load_model_from_file
        model = load_model(path.encode(), lc.llama_model_default_params())
        n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
        ps = prompts(streams + 1, n_vocab)
        _llama_cpp_batched_run(lc, model, [ps[-1]] * 2, 4)
        _, decode_only = _llama_cpp_batched_run(lc, model, ps[:streams], tokens)
        return {"tok_s": decode_only}
    # One stream as gemma_bench runs it: llama-cpp-python's own eval, greedy over its scores.
    llm = lc.Llama(
        path, n_ctx=PROMPT_TOKENS + tokens + 16, n_threads=threads, n_threads_batch=threads, verbose=False
    )  # fmt: skip
    ps = prompts(2, llm.n_vocab())

    def one(ids: list[int], n: int) -> float:
        llm.reset()
        llm.eval(ids)
        t0 = time.perf_counter()
        for _ in range(n - 1):
            llm.eval([int(llm.scores[llm.n_tokens - 1].argmax())])
        return (n - 1) / (time.perf_counter() - t0)

    one(ps[1], 4)
    return {"tok_s": one(ps[0], tokens)}


WORKERS = {"native": worker_native, "llama_cpp": worker_llama_cpp}


def spawn(engine: str, path: str, threads: int, tokens: int, streams: int) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", engine, "--gguf", path]
    cmd += ["--threads", str(threads), "--tokens", str(tokens), "--streams", str(streams)]
    env = {**os.environ, "SWITCHYARD_ENGINE_THREADS": str(threads)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} worker failed on {path} ({streams} streams):\n{out.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def measure(
    paths: dict[str, str], streams: list[int], tokens: int, threads: int, rounds: int
) -> dict[str, dict[int, dict[str, float]]]:
    """{family: {streams: {engine: best tok/s}}}, the engines alternated point by point."""
    r: dict[str, dict[int, dict[str, float]]] = {f: {s: {} for s in streams} for f in paths}
    for rnd in range(rounds):
        order = list(WORKERS) if rnd % 2 == 0 else list(reversed(WORKERS))
        for family, path in paths.items():
            for s in streams:
                for engine in order:
                    v = spawn(engine, path, threads, tokens, s)["tok_s"]
                    r[family][s][engine] = max(r[family][s].get(engine, 0.0), v)
                    print(f"round {rnd + 1} {family} {s} stream(s) {engine}: {v:.1f} tok/s", flush=True)
    return r


# -- the table -------------------------------------------------------------------------------------
def render(
    r: dict[str, dict[int, dict[str, float]]], *, key: str, name: str, when: str, mach: str, command: str, info: str
) -> str:
    begin, end = markers(key)
    streams = sorted(next(iter(r.values())))
    many = [s for s in streams if s > 1]
    head = ["family", "adds"]
    if 1 in streams:
        head += ["ours 1-stream tok/s", "llama.cpp 1-stream tok/s", "ratio", "TPOT ms ours / llama.cpp"]
    for s in many:
        head += [f"ours {s} streams tok/s", f"llama.cpp batched {s} streams tok/s", "ratio"]
    lines = [
        begin,
        "### Model families",
        "",
        f"- date: {when}; CPU class: {name}",
        f"- machine: {mach}",
        f"- command: `{command}`",
        f"- {info}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for family, per in r.items():
        cells = [family, ADDS.get(family, "")]
        for s in streams:
            ours, theirs = per[s].get("native"), per[s].get("llama_cpp")
            cells += [_f(ours), _f(theirs), _ratio(ours, theirs)]
            if s == 1:
                cells.append(f"{_f(ours and 1000 / ours, 2)} / {_f(theirs and 1000 / theirs, 2)}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Ratios are ours / llama.cpp (above 1: the native engine is faster).", end, ""]
    return "\n".join(lines)


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if not v else f"{v:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def write(out: str, section: str, key: str, name: str) -> None:
    """The section between this class's markers, or, the first time, at the end of the page's part
    for the class (`## <name> class...`)."""
    begin, end = markers(key)
    write_section(out, begin, end, section, under=f"## {name} class")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("docs", "benchmarks.md"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--tokens", type=int, default=64, help="new tokens a stream")
    ap.add_argument("--streams", default="1,32", help="1: the single-stream point; more: batched decode")
    ap.add_argument("--rounds", type=int, default=2, help="every point this many times; the best counts")
    ap.add_argument("--threads", type=int, default=1, help="threads for each engine")
    ap.add_argument("--llama-cpp-dir", help="llama.cpp's source (holds convert_hf_to_gguf.py); else fetched")
    ap.add_argument("--quick", action="store_true", help="16 tokens, 1 and 8 streams, one round")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--gguf", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(WORKERS[a.worker](a.gguf, a.threads, a.tokens, int(a.streams))))
        return
    if a.quick:
        a.tokens, a.streams, a.rounds = 16, "1,8", 1
    if importlib.util.find_spec("llama_cpp") is None:
        raise SystemExit("llama-cpp-python is not installed: it is the baseline of every ratio here")
    families = a.families.split(",")
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown families {sorted(unknown)} (these: {', '.join(FAMILIES)})")
    streams = [int(s) for s in a.streams.split(",")]
    command = shlex.join(["python", "bench/family_bench.py", *sys.argv[1:]])
    load = os.getloadavg()[0]
    paths = ensure_ggufs(families, a.llama_cpp_dir)
    r = measure(paths, streams, a.tokens, a.threads, a.rounds)
    key, name = cpu_class()
    info = (
        f"weights: random, written by transformers at SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, "
        f"3 KV heads, intermediate 1536, 49152 tokens; Qwen 3 head_dim 64), converted to Q8_0 by llama.cpp's "
        f"convert_hf_to_gguf.py (llama-cpp-python {LLAMA_CPP_VERSION}'s); native format `native`, "
        f"llama-cpp-python {LLAMA_CPP_VERSION}; {a.threads} thread(s) each; {PROMPT_TOKENS}-token prompts, "
        f"{a.tokens} new tokens a stream, greedy, EOS ignored; decode alone (after every prompt's first "
        f"token); each point one process per engine, engines alternated point by point, best of "
        f"{a.rounds} round(s); load average at start {load:.2f}"
    )
    when = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    section = render(r, key=key, name=name, when=when, mach=machine(), command=command, info=info)
    write(a.out, section, key, name)
    print(section)


if __name__ == "__main__":
    main()
