"""`make bench`: every benchmark, results written into docs/benchmarks.md.

llama-cpp-python is a baseline, not a dependency: it is built here on demand (about 6 minutes
on 2 cores) and the engine benchmark notes its absence when the build fails or is refused
(SWITCHYARD_BENCH_NO_INSTALL=1). It is built without ggml's AMX backend: on AMX CPUs that
backend's matrix product segfaults on the first multi-token prompt (ggml-org/llama.cpp#20824), so
on a CPU with AMX the build targets AVX-512 (with VNNI and BF16) explicitly instead of the native CPU.

`--peers` (`make bench BENCH_FLAGS=--peers`) ends with the peers benchmark, `make bench-peers` alone:
the stack against llama.cpp's llama-server and vLLM's OpenAI server (bench/peers_bench.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from bench.report import cpu_info

# Every x86 feature ggml uses here except AMX (see the module docstring).
LLAMA_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX_VNNI=ON "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)


def ensure_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is not None or os.environ.get("SWITCHYARD_BENCH_NO_INSTALL"):
        return
    print("building llama-cpp-python for the baseline (once) ...", flush=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir", "llama-cpp-python"],
            env={
                **os.environ,
                "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", LLAMA_CMAKE_ARGS if "amx_tile" in cpu_info()[1] else ""),
            },
            timeout=1800,
            check=True,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"llama-cpp-python unavailable, its baseline is skipped: {exc}", flush=True)


def main() -> int:
    out = ["--out", "docs/benchmarks.md"]
    # This file's own flags: --peers (the peers benchmark at the end) and --families (the model-family
    # table: it builds four GGUFs the first time, minutes of converter runs, so it is asked for rather than
    # run every time); engine_bench takes the rest.
    peers = "--peers" in sys.argv[1:]
    families = "--families" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a not in ("--peers", "--families")]
    ensure_llama_cpp()
    rc = subprocess.call([sys.executable, "bench/engine_bench.py", *out, *args])
    rc = rc or subprocess.call([sys.executable, "bench/constraint_bench.py", *out])
    rc = rc or subprocess.call([sys.executable, "bench/gemma_bench.py", *out])
    # A paid-tier request behind a queue of free-tier ones: first come, first served against priority.
    rc = rc or subprocess.call([sys.executable, "bench/priority_bench.py", *out])
    if families:
        quick = ["--quick"] if "--quick" in args else []
        rc = rc or subprocess.call([sys.executable, "bench/family_bench.py", *out, *quick])
    rc = rc or subprocess.call([sys.executable, "bench/tokenizer_bench.py", *out])
    rc = rc or subprocess.call([sys.executable, "-m", "bench.safety_bench", *out])
    # The whole stack as a client sees it, against the engine alone (what a user feels).
    quick = ["--levels", "1,8", "--tokens", "32"] if "--quick" in args else []
    rc = rc or subprocess.call([sys.executable, "-m", "bench.pipeline_bench", *out, *quick])
    # What each stage costs in CPU per token and per request: on the real engine at make run's load, and at
    # GPU token rates on the simulated engine; the sizing table comes from the second.
    native = ["--levels", "1,32", "--lengths", "16,64"]
    sim = ["--levels", "1,32"] if quick else []
    rc = rc or subprocess.call([sys.executable, "-m", "bench.stage_bench", "--engine", "native", *out, *native])
    rc = rc or subprocess.call([sys.executable, "-m", "bench.pipeline_bench", "--engine", "sim", *out, *sim])
    if peers:  # against llama-server and vLLM's server (`make bench-peers` alone; builds llama-server once)
        rc = rc or subprocess.call(
            [sys.executable, "-m", "bench.peers_bench", *out, *(["--levels", "1,8"] if quick else [])]
        )
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
