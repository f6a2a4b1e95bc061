"""The three servers the peers benchmark drives, each started here and stopped by `close()`.

Every server is one OpenAI-compatible base URL and a model name; llama-server and vLLM run in process
groups of their own (start_new_session), so stopping one takes its children too; the Switchyard stack
is started as `make run` starts it (bench/pipeline_bench.py's environment) and stopped by Stack.stop().
A server that does not come up within its deadline is an error quoting its log's tail, never a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
MODEL_NAME = "smollm2"  # what llama-server and vLLM are told to call the model


@dataclass
class Server:
    name: str
    url: str
    model: str
    log: Path
    api_key: str = ""
    command: str = ""
    ready_s: float = 0.0
    notes: dict[str, str] = field(default_factory=dict)
    _close: Callable[[], None] = lambda: None
    # The process group to hold still while another server has its turn (None: the server is left running).
    group: int | None = None

    def close(self) -> None:
        close, self._close = self._close, lambda: None
        close()

    def pause(self, paused: bool) -> None:
        """SIGSTOP or SIGCONT to the server's process group: vLLM's CPU worker polls about a core while
        idle, which would be taken from whichever server has the turn."""
        if self.group is not None:
            try:
                os.killpg(self.group, signal.SIGSTOP if paused else signal.SIGCONT)
            except ProcessLookupError:
                pass


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_group(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM to the process group, SIGKILL to what is left after `timeout_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGCONT)  # a paused server would not see the SIGTERM
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_models(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float, name: str) -> str:
    """Until GET /v1/models answers with a model (both servers answer 503 while loading); its id."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} while starting; {log}:\n{log_tail(log)}")
        try:
            r = httpx.get(f"{url}/v1/models", timeout=5)
            if r.status_code == 200 and r.json().get("data"):
                return str(r.json()["data"][0]["id"])
            last = f"HTTP {r.status_code}"
        except (httpx.HTTPError, ValueError) as e:
            last = type(e).__name__
        time.sleep(1.0)
    raise RuntimeError(f"{name} not ready within {timeout_s:.0f}s ({last}); {log}:\n{log_tail(log)}")


def spawn(name: str, cmd: list[str], port: int, logs: Path, timeout_s: float, env: dict[str, str]) -> Server:
    log = logs / f"{name}.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True, cwd=ROOT
        )
    url = f"http://127.0.0.1:{port}"
    t = time.monotonic()
    try:
        model = wait_models(url, proc, log, timeout_s, name)
    except BaseException:
        stop_group(proc)
        raise
    shown = " ".join(f"{k}={v}" for k, v in env.items())
    return Server(
        name,
        url,
        model,
        log,
        command=f"{shown} {' '.join(cmd)}".strip(),
        ready_s=time.monotonic() - t,
        _close=lambda: stop_group(proc),
        group=proc.pid,
    )


def start_llama(binary: Path, gguf: str, threads: int, slots: int, slot_ctx: int, logs: Path) -> Server:
    """llama-server with one slot per stream at the highest level, each with `slot_ctx` tokens of context."""
    from switchyard.libs.bus.embedded import free_port

    port = free_port()
    cmd = [str(binary), "-m", gguf, "-t", str(threads), "-np", str(slots), "-c", str(slots * slot_ctx)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--alias", MODEL_NAME]
    s = spawn("llama-server", cmd, port, logs, 300, {})
    s.notes = {
        "llama.cpp": llama_version(binary),
        "weights": os.path.basename(gguf),
        "threads": str(threads),
        "slots": f"{slots} x {slot_ctx} tokens",
    }
    return s


def llama_version(binary: Path) -> str:
    """`version: N (build B, commit C)` from the binary, the commit being what tells builds apart."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    line = next((x for x in (out.stdout + out.stderr).splitlines() if x.startswith("version:")), "")
    return line.removeprefix("version:").strip() or "?"


def hf_dir(gguf: str) -> Path:
    """The Hugging Face checkpoint vLLM loads, in the engine cache where the vllm engine kind keeps its own
    (switchyard/libs/engine/vllm_engine.py), written once by `switchyard export-hf` aside and moved in."""
    path = ROOT / "var" / "cache" / "engine" / "hf" / Path(gguf).stem
    if (path / "config.json").is_file():
        return path
    import sys

    tmp = Path(f"{path}.tmp-{os.getpid()}")
    print(f"writing the HF checkpoint vLLM loads (once): {path}", flush=True)
    cmd = [sys.executable, "-m", "switchyard.cli", "export-hf", str(tmp), "--gguf", gguf]
    subprocess.run(cmd, check=True, timeout=900, cwd=ROOT)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, path)
    return path


def start_vllm(python: str, gguf: str, slots: int, max_len: int, eager: bool, logs: Path) -> Server:
    """vLLM's OpenAI server as the vllm engine kind configures it: fp32 weights (the CPU build emulates bf16
    on AVX2), prefix caching on (its default), room for every stream at once."""
    from switchyard.libs.bus.embedded import free_port

    model = hf_dir(gguf)
    port = free_port()
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    cmd += ["--max-num-seqs", str(slots), "--max-model-len", str(max_len), "--disable-log-stats"]
    cmd += ["--enforce-eager"] if eager else []
    # Its CPU build's KV budget in GiB (the default is sized for bigger models than this one).
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"), "PYTHONWARNINGS": "ignore"}
    # Compiling its graphs takes minutes on 2 cores.
    s = spawn("vllm", cmd, port, logs, 900, env)
    s.notes = {"weights": "float32 (HF checkpoint from the GGUF)", "mode": "eager" if eager else "compiled"}
    return s


def start_switchyard(logs: Path) -> Server:
    """The stack as `make run` starts it, with the benchmark's environment (bench/pipeline_bench.py)."""
    from bench.pipeline_bench import stack_env
    from switchyard.cli.stack import Stack
    from switchyard.libs.bus.embedded import free_port

    data = Path(tempfile.mkdtemp(prefix="peers-bench-stack-", dir=logs))
    stack = Stack(data_dir=data, port=free_port(), env=stack_env())
    t = time.monotonic()
    try:
        stack.start(timeout_s=900)
        r = httpx.get(f"{stack.url}/v1/models", headers={"Authorization": f"Bearer {stack.api_key}"}, timeout=10)
        model = f"{r.json()['data'][0]['id']}:fast"  # one phase: the output length is the asked one
    except BaseException as e:
        stack.stop()
        if isinstance(e, RuntimeError | TimeoutError):
            raise RuntimeError(f"switchyard: {e}\n{log_tail(data / 'logs' / 'inference.log')}") from e
        raise
    return Server(
        "switchyard",
        stack.url,
        model,
        data / "logs",
        api_key=stack.api_key,
        ready_s=time.monotonic() - t,
        command="python -m switchyard.cli run (switchyard.cli.stack.Stack, bench/pipeline_bench.py's stack_env)",
        notes={"weights": os.environ.get("SWITCHYARD_INFERENCE_DTYPE", "auto")},
        _close=stack.stop,
    )
