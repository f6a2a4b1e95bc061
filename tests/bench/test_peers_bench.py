"""The peers benchmark's parts that need no server for minutes: prompts, the table and its section, the CPU
class, the build cache, process groups and start-up deadlines; and one tiny point against a real llama-server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import peers_build, peers_servers
from bench.peers_bench import expected_s, parse, points, run_point
from bench.peers_prompts import WORKLOADS, build_prompt, tokenizer_count
from bench.peers_report import MARK_BEGIN, MARK_END, cpu_class, render, summarize
from bench.report import write_section
from bench.sse_client import Streamed

MS = 1_000_000


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_prompts_open_with_the_nonce_and_come_near_the_target(workload: str) -> None:
    count, target = tokenizer_count(), WORKLOADS[workload].prompt_tokens
    prompts = [build_prompt("c0ffee42", i, target, count) for i in range(12)]
    assert all(p.startswith(f"[c0ffee42-{i}] ") for i, p in enumerate(prompts))
    assert all(target - 4 <= count(p) <= target for p in prompts), [count(p) for p in prompts]
    assert len(set(prompts)) == len(prompts)


@pytest.mark.slow
def test_no_prompt_trips_our_input_safety() -> None:
    """A blocked prompt is an error in Switchyard's column only: every note and question combination
    (they repeat every 36 requests) passes the input guard the stack runs (it loads the classifier)."""
    from switchyard.libs.safety.guard import InputGuard

    guard, count = InputGuard(), tokenizer_count()
    for w in WORKLOADS.values():
        for i in range(36):
            text = build_prompt("5eed5eed", i, w.prompt_tokens, count)
            assert [v for v in guard.check(text) if v.action != "allow"] == [], text


def test_the_requests_and_the_output_length_follow_the_options() -> None:
    full = points(parse([]))
    assert [(w.name, level, n, w.out_tokens) for w, level, n in full] == [
        ("prefill", 1, 8, 64),
        ("prefill", 8, 16, 64),
        ("prefill", 32, 64, 64),
        ("decode", 1, 8, 128),
        ("decode", 8, 16, 128),
        ("decode", 32, 64, 128),
    ]
    smoke = points(parse(["--levels", "1", "--requests", "1", "--tokens", "4", "--workloads", "decode"]))
    assert [(w.name, level, n, w.out_tokens) for w, level, n in smoke] == [("decode", 1, 1, 4)]
    assert expected_s(smoke, 3) < expected_s(full, 3)
    with pytest.raises(SystemExit):
        parse(["--servers", "ollama"])


@pytest.mark.parametrize(
    ("flags", "name"),
    [
        ({"avx2", "avx512f", "amx_tile", "amx_int8"}, "AMX"),
        ({"avx2", "avx512f", "avx512_bf16"}, "AVX-512"),
        ({"avx", "avx2", "fma"}, "AVX2"),
        ({"sse4_2"}, "no AVX2"),
    ],
)
def test_cpu_class(flags: set[str], name: str) -> None:
    assert cpu_class(frozenset(flags)) == name


def streamed(ttft_ms: float, tokens: int, itl_ms: float = 10.0, error: str | None = None) -> Streamed:
    s = Streamed(rid="", t_send_ns=0, completion_tokens=tokens, error=error)
    s.delta_ns = [int((ttft_ms + i * itl_ms) * MS) for i in range(tokens)]
    return s


def run_record(tok_s: dict[str, float]) -> dict[str, Any]:
    def point(name: str) -> dict[str, Any]:
        return {**summarize([streamed(100.0, 8)], 8 / tok_s[name]), "turn": 0}

    return {
        "date": "2026-12-07 05:00 UTC",
        "command": "python -m bench.peers_bench",
        "machine": "x86_64, test CPU, 2 cores",
        "cpu_class": "AVX-512",
        "load": "1.00",
        "model": "SmolLM2.gguf",
        "requests_note": "1 at 1 stream(s)",
        "servers": {
            "switchyard": {"command": "make run", "ready_s": 9.0, "notes": {"weights": "auto"}},
            "llama-server": {"command": "llama-server -m x", "ready_s": 1.0, "notes": {"threads": "2"}},
            "vllm": {"error": "vllm not ready within 900s (HTTP 503); log:\n..."},
        },
        "points": {"decode": {"1": {"switchyard": point("switchyard"), "llama-server": point("llama-server")}}},
    }


def test_summary_of_a_point() -> None:
    samples = [streamed(100.0, 8), streamed(300.0, 8), streamed(0.0, 0, error="HTTP 500: boom")]
    p = summarize(samples, 2.0)
    assert p["requests"] == 3 and p["errors"] == 1 and p["first_errors"] == ["HTTP 500: boom"]
    assert p["tok_s"] == 8.0 and p["tokens_per_request"] == [8]
    assert p["ttft_ms"]["p50"] == pytest.approx(200.0) and p["tpot_ms"]["p50"] == pytest.approx(10.0)


def test_an_answer_stopped_by_output_safety_is_counted_apart_from_the_errors() -> None:
    blocked = 'data: {"error":{"type":"content_blocked","code":"content_blocked","message":"answer stopped"}}'
    samples = [streamed(100.0, 8), streamed(100.0, 3, error=blocked), streamed(0.0, 0, error="HTTP 500: boom")]
    p = summarize(samples, 1.0)
    assert p["errors"] == 1 and p["stopped_by_safety"] == 1 and p["first_errors"] == ["HTTP 500: boom"]
    assert p["tok_s"] == 8.0 and p["tokens_per_request"] == [8]


def test_the_section_is_replaced_at_the_end_not_duplicated(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\n## Engine benchmark\n\nfigures\n")
    write_section(str(out), MARK_BEGIN, MARK_END, render(run_record({"switchyard": 100.0, "llama-server": 50.0})))
    first = out.read_text()
    assert first.startswith("# Benchmarks\n\n## Engine benchmark\n\nfigures\n\n" + MARK_BEGIN)
    assert first.rstrip().endswith(MARK_END)
    assert "| decode | 1 | llama-server | 50.0 | 0.500x |" in first
    assert "- vllm: **did not run**: vllm not ready within 900s (HTTP 503); log:" in first
    write_section(str(out), MARK_BEGIN, MARK_END, render(run_record({"switchyard": 100.0, "llama-server": 200.0})))
    second = out.read_text()
    assert second.count("### Peers") == 1 and second.count(MARK_BEGIN) == 1 and second.count(MARK_END) == 1
    assert "| decode | 1 | llama-server | 200.0 | 2.000x |" in second and "50.0" not in second
    assert second.startswith("# Benchmarks\n\n## Engine benchmark\n\nfigures\n")


def test_a_built_server_is_not_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_LLAMA_SERVER_CACHE", str(tmp_path))
    binary = peers_build.binary_path("9.9.9")
    assert binary == tmp_path / "9.9.9" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)

    def no_build(*a: Any, **k: Any) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(peers_build, "_run", no_build)
    assert peers_build.ensure_llama_server("9.9.9") == binary


def test_the_build_avoids_amx_and_refuses_a_tree_without_llama_cpp(tmp_path: Path) -> None:
    assert "-DGGML_NATIVE=ON" in peers_build.cmake_args(frozenset({"avx2", "avx512f"}))
    amx = peers_build.cmake_args(frozenset({"avx512f", "amx_tile"}))
    assert "-DGGML_NATIVE=OFF" in amx and "-DGGML_AMX_TILE=OFF" in amx and "-DLLAMA_BUILD_SERVER=ON" in amx
    with pytest.raises(RuntimeError, match="not an unpacked llama-cpp-python sdist"):
        peers_build.find_source("9.9.9", str(tmp_path), tmp_path)


def test_stopping_a_paused_server_takes_its_whole_process_group() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    server = peers_servers.Server("x", "http://127.0.0.1:9", "m", Path("x.log"), group=proc.pid)
    server.pause(True)  # held still, as while another server has its turn: SIGTERM must still end it
    t = time.monotonic()
    peers_servers.stop_group(proc, timeout_s=20)
    assert proc.poll() is not None and time.monotonic() - t < 10
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("the server's child outlived it")


def test_a_server_that_dies_or_never_answers_is_an_error_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("loading\nout of memory\n")
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    with pytest.raises(RuntimeError, match=r"exited with 3 while starting(.|\n)*out of memory"):
        peers_servers.wait_models("http://127.0.0.1:9", dead, log, 30, "x")
    mute = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t = time.monotonic()
        with pytest.raises(RuntimeError, match=r"not ready within 2s"):
            peers_servers.wait_models("http://127.0.0.1:9", mute, log, 2, "x")
        assert time.monotonic() - t < 10
    finally:
        mute.kill()
        mute.wait()


@pytest.mark.slow
def test_one_point_against_a_real_llama_server(tmp_path: Path) -> None:
    """Four tokens from the cached llama-server (skipped until `python -m bench.peers_build` has built it)."""
    from bench.engine_bench import model_path

    binary = peers_build.binary_path()
    if not binary.is_file():
        pytest.skip(f"no {binary}: python -m bench.peers_build")
    server = peers_servers.start_llama(binary, model_path(), 1, 2, 256, tmp_path)
    try:
        texts = [build_prompt("feedface", i, 35, tokenizer_count()) for i in range(2)]
        p = asyncio.run(run_point(server, texts, 2, 4, 120))
    finally:
        server.close()
    assert p["errors"] == 0, p["first_errors"]
    assert p["tokens_per_request"] == [4] and p["tok_s"] > 0 and p["ttft_ms"]["p50"] > 0


def test_the_client_sends_again_on_a_connection_the_server_closed() -> None:
    """llama-server closes a kept-alive connection after each stream: the next request on it is sent once
    more on a new connection, and each stream is read whole."""
    from bench.sse_client import drive

    chunk = b'data: {"choices":[{"delta":{"content":"hi"},"index":0}],"usage":{"completion_tokens":1}}\n\n'
    done = b"data: [DONE]\n\n"
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (chunk, done)) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    served: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raw = await reader.readuntil(b"\r\n\r\n")
        n = int(next(x for x in raw.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(n)
        served.append(n)
        writer.write(head + body)
        await writer.drain()
        writer.close()

    async def main() -> list[Streamed]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await asyncio.wait_for(drive([f"http://127.0.0.1:{port}"], "", "m", ["a", "b", "c"], 1, 1), 10)

    out = asyncio.run(main())
    assert [(s.error, len(s.delta_ns), s.completion_tokens) for s in out] == [(None, 1, 1)] * 3
    assert len(served) == 3
