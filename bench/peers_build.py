"""llama.cpp's `llama-server`, built from source once and cached outside the checkout.

    python -m bench.peers_build [--src DIR]      # prints the binary's path; a second run does nothing

llama.cpp's source comes from the llama-cpp-python sdist (it vendors llama.cpp in `vendor/llama.cpp`):
`--src` (or SWITCHYARD_LLAMA_CPP_SRC) names an unpacked sdist, else pip downloads the pinned sdist into the
cache and it is unpacked there. The build lands in `~/.cache/switchyard/llama-server/<version>/`
(SWITCHYARD_LLAMA_SERVER_CACHE moves it); nothing of llama.cpp is ever written into the checkout.

ggml's AMX backend segfaults on the first multi-token prompt (ggml-org/llama.cpp#20824, see
bench/__main__.py), so on a CPU with AMX the build targets AVX-512 explicitly instead of the native CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import cpu_info

LLAMA_CPP_PYTHON = "0.3.36"
BASE_ARGS = ("-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release")
# Every x86 feature ggml uses here except AMX (see the module docstring).
NO_AMX_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX_VNNI=ON "
    "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
).split()
# A build on 2 busy cores takes tens of minutes; past these something is wrong, not slow.
CONFIGURE_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 5400
DOWNLOAD_TIMEOUT_S = 600


def cache_root() -> Path:
    env = os.environ.get("SWITCHYARD_LLAMA_SERVER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "switchyard" / "llama-server"


def binary_path(version: str = LLAMA_CPP_PYTHON) -> Path:
    return cache_root() / version / "bin" / "llama-server"


def cmake_args(flags: frozenset[str] | None = None) -> list[str]:
    flags = cpu_info()[1] if flags is None else flags
    return [*BASE_ARGS, *(NO_AMX_ARGS if "amx_tile" in flags else ["-DGGML_NATIVE=ON"])]


def _run(cmd: list[str], timeout_s: float, log: Path) -> None:
    """One build step, niced (the box is shared), its output in `log`, in a process group of its own so that
    a timeout or Ctrl-C stops the compilers under it too; a failure quotes the log's tail."""
    from bench.peers_servers import log_tail, stop_group

    print("$ " + " ".join(cmd), flush=True)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(["nice", "-n", "10", *cmd], stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{cmd[0]} ran past {timeout_s}s; log: {log}") from e
    finally:
        stop_group(proc, timeout_s=5)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {rc}; log {log}:\n{log_tail(log, 25)}")


def find_source(version: str, src: str | None, work: Path) -> Path:
    """llama.cpp's source tree: from the unpacked sdist given, else the one unpacked in the cache, else
    downloaded (sdist only, no dependencies) and unpacked there."""
    given = src or os.environ.get("SWITCHYARD_LLAMA_CPP_SRC")
    if given:
        tree = Path(given) / "vendor" / "llama.cpp"
        if not (tree / "CMakeLists.txt").is_file():
            raise RuntimeError(f"{given} is not an unpacked llama-cpp-python sdist (no vendor/llama.cpp)")
        return tree
    tree = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    sdist = work / "sdist"
    sdist.mkdir(parents=True, exist_ok=True)
    if not list(sdist.glob("llama_cpp_python-*.tar.gz")):
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
        _run([*cmd, f"llama-cpp-python=={version}", "-d", str(sdist)], DOWNLOAD_TIMEOUT_S, work / "build.log")
    archive = next(iter(sdist.glob("llama_cpp_python-*.tar.gz")), None)
    if archive is None:
        raise RuntimeError(f"pip downloaded no llama-cpp-python sdist into {sdist}")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    if not (tree / "CMakeLists.txt").is_file():
        raise RuntimeError(f"{archive} has no vendor/llama.cpp")
    return tree


def ensure_llama_server(version: str = LLAMA_CPP_PYTHON, src: str | None = None, jobs: int = 2) -> Path:
    """The cached binary, built first where it is missing; built aside and moved in, so a build cut
    short never passes for a finished one."""
    target = binary_path(version)
    if target.is_file() and os.access(target, os.X_OK):
        return target
    work = target.parent.parent
    work.mkdir(parents=True, exist_ok=True)
    tree = find_source(version, src, work)
    build, log = work / "build", work / "build.log"
    print(f"building llama-server {version} from {tree} (once; log {log}) ...", flush=True)
    t = time.monotonic()
    _run(["cmake", "-S", str(tree), "-B", str(build), *cmake_args()], CONFIGURE_TIMEOUT_S, log)
    _run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], BUILD_TIMEOUT_S, log)
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise RuntimeError(f"the build finished without {built}; log: {log}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)
    print(f"  built in {time.monotonic() - t:.0f}s: {target}", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=LLAMA_CPP_PYTHON, help="llama-cpp-python sdist whose llama.cpp is built")
    ap.add_argument("--src", default=None, help="an unpacked llama-cpp-python sdist (default: download it)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    print(ensure_llama_server(args.version, args.src, args.jobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
