"""`make bench`: every benchmark, results written into docs/benchmarks.md.

llama-cpp-python is a baseline, not a dependency: it is built here on demand (about 6 minutes
on 2 cores) and the engine benchmark notes its absence when the build fails or is refused
(SWITCHYARD_BENCH_NO_INSTALL=1).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys


def ensure_llama_cpp() -> None:
    if importlib.util.find_spec("llama_cpp") is not None or os.environ.get("SWITCHYARD_BENCH_NO_INSTALL"):
        return
    print("building llama-cpp-python for the baseline (once) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "llama-cpp-python"], timeout=1800, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"llama-cpp-python unavailable, its baseline is skipped: {exc}", flush=True)


def main() -> int:
    out = ["--out", "docs/benchmarks.md"]
    ensure_llama_cpp()
    rc = subprocess.call([sys.executable, "bench/engine_bench.py", *out, *sys.argv[1:]])
    return rc or subprocess.call([sys.executable, "-m", "bench.safety_bench", *out])


if __name__ == "__main__":
    raise SystemExit(main())
