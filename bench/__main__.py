"""`make bench`: every benchmark, results written into docs/benchmarks.md."""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    out = ["--out", "docs/benchmarks.md"]
    rc = subprocess.call([sys.executable, "bench/engine_bench.py", *out, *sys.argv[1:]])
    return rc or subprocess.call([sys.executable, "-m", "bench.safety_bench", *out])


if __name__ == "__main__":
    raise SystemExit(main())
