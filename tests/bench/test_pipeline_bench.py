"""The pipeline benchmark: its bookkeeping on made-up requests, and one tiny run against the real stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.pipeline_bench import vllm_env, vllm_wanted
from bench.pipeline_client import Sample
from bench.pipeline_report import COMPARED, MARK_BEGIN, MARK_END, compare, render, summarize, targets
from bench.pipeline_stages import STAGES, first_byte_path
from tests.engine.test_vllm_venv import REQUIRED

ROOT = Path(__file__).resolve().parents[2]
MS = 1_000_000


def span(
    service: str, name: str, start_ms: float, end_ms: float, kind: str = "consumer", **extra: Any
) -> dict[str, Any]:
    return {
        "service": service,
        "name": name,
        "kind": kind,
        "start_ns": int(start_ms * MS),
        "end_ns": int(end_ms * MS),
        "events": [],
        **extra,
    }


def request(t0_ms: float = 1000.0, ttft_ms: float = 500.0, deltas: int = 8, tokens: int = 8) -> Sample:
    """A request whose stages follow one another: context at +10, safety_in +20, router +50, tools +55,
    inference +70 (handshake until +80), first token +180, the gateway's first event +300."""
    t = t0_ms
    spans = [
        span("gateway", "POST /v1/chat/completions", t + 2, t + 2000, kind="server"),
        span("context", "process pipeline.context", t + 10, t + 18),
        span("safety_in", "process pipeline.safety_in", t + 20, t + 45),
        span("router", "process pipeline.route", t + 50, t + 51),
        span("tools", "process pipeline.tools", t + 55, t + 65),
        span("inference", "process infer.default.{replica}", t + 70, t + 1900),
        span("safety_out", "process pipeline.safety_out", t + 72, t + 76),
        span(
            "inference",
            "chat SmolLM2",
            t + 80,
            t + 1890,
            kind="client",
            events=[{"name": "gen_ai.first_token", "time_ns": int((t + 180) * MS)}],
        ),
        span("logger", "store log.context", t + 19, t + 30),
    ]
    first = t + ttft_ms
    return Sample(
        rid="r",
        text="hi",
        t_send_ns=int(t * MS),
        t_end_ns=int((first + 1000) * MS),
        status=200,
        delta_ns=[int((first + 10 * i) * MS) for i in range(deltas)],
        completion_tokens=tokens,
        record={"usage": {"ttft_ms": 100.0, "tpot_ms": 10.0}, "gateway": {"first_event_ms": 298.0}},
        spans=spans,
    )


def test_stage_shares_add_up_to_the_client_ttft() -> None:
    s = request()
    path = first_byte_path(s)
    assert list(path) == list(STAGES)
    adds = {k: v[1] for k, v in path.items()}
    assert adds == pytest.approx(
        {
            "gateway": 10.0,
            "context": 10.0,
            "safety_in": 30.0,
            "router": 5.0,
            "tools": 15.0,
            "safety_out handshake": 10.0,
            "inference queue + prefill": 100.0,
            "safety_out release": 120.0,
            "relay": 200.0,
        }
    )
    assert sum(adds.values()) == pytest.approx(s.client_ttft_ms)
    own = {k: v[0] for k, v in path.items()}
    assert own["context"] == pytest.approx(8.0) and own["safety_out handshake"] == pytest.approx(4.0)
    assert own["inference queue + prefill"] == 100.0  # the engine's own TTFT from the record
    assert s.added_ttft_ms == pytest.approx(400.0)


def test_overlapping_stages_add_nothing_and_a_missing_point_goes_to_the_stage_before() -> None:
    s = request()
    # safety_in now starts with context (in parallel) and the gateway's record lost its first event.
    s.spans[2] = span("safety_in", "process pipeline.safety_in", 1010, 1045)
    s.record["gateway"] = {}
    path = first_byte_path(s)
    assert path["context"][1] == 0.0  # safety_in started at the same moment: context is off the path
    assert path["safety_in"][1] == pytest.approx(40.0)
    assert path["relay"] == (None, None)
    assert path["safety_out release"][1] == pytest.approx(320.0)  # first token → client, relay included
    assert sum(v[1] or 0.0 for v in path.values()) == pytest.approx(s.client_ttft_ms)


def test_work_beside_the_prefill_adds_nothing_unless_it_outlasts_it() -> None:
    """safety_in asked while the model prefills: hidden behind it, or the path itself when it outlasts it."""
    s = request()
    s.spans[2] = span("safety_in", "process pipeline.safety_in", 1085, 1150)  # inside the prefill (1080-1180)
    path = first_byte_path(s)
    assert path["safety_in"] == (pytest.approx(65.0), 0.0)
    assert path["inference queue + prefill"][1] == pytest.approx(100.0)
    assert path["router"][1] == pytest.approx(5.0) and path["tools"][1] == pytest.approx(15.0)
    assert path["context"][1] == pytest.approx(40.0)  # 1010 → router at 1050: nothing else ran between
    # Ending 50 ms after the first token, it is the path: the prefill beside it is hidden behind it.
    s.spans[2] = span("safety_in", "process pipeline.safety_in", 1085, 1230)
    path = first_byte_path(s)
    assert path["safety_in"][1] == pytest.approx(145.0)
    assert path["inference queue + prefill"][1] == pytest.approx(5.0)
    assert path["safety_out release"][1] == pytest.approx(70.0)
    assert sum(v[1] or 0.0 for v in path.values()) == pytest.approx(s.client_ttft_ms)


def test_summary_targets_and_section() -> None:
    samples = {1: [request(ttft_ms=120.0) for _ in range(3)], 32: [request(ttft_ms=140.0, deltas=2)]}
    failed = Sample(rid="x", text="hi", t_send_ns=1000 * MS, t_end_ns=1001 * MS, error="HTTP 503: overloaded")
    samples[32].append(failed)
    engine = {"threads": 1, "dtype": "int8", "levels": {"1": {"tok_s": 5.0}, "32": {"tok_s": 4.0, "ttft_ms": [90.0]}}}
    r = {"load": "0.10", **summarize(samples, engine)}
    one, many = r["levels"]["1"], r["levels"]["32"]
    assert one["added_ttft_ms"]["p50"] == pytest.approx(20.0) and one["deltas_per_token"]["p50"] == 1.0
    assert many["error_count"] == 1 and many["errors"] == ["HTTP 503: overloaded"]
    assert many["deltas_per_token"]["p50"] == 0.25 and many["completion_tokens"] == [8]
    met = {name: ok for name, _, _, ok in targets(r)}
    assert met["pipeline-added TTFT p50 at 1 stream (ms)"] is True  # 20 ms
    assert met["pipeline-added TTFT p50 at 32 streams / the engine's TTFT p50"] is False  # 40 of 100 ms
    assert met["deltas per token p50, the level furthest from 1"] is False  # 0.25 at 32
    section = render(8, r)
    assert section.startswith(MARK_BEGIN) and section.rstrip().endswith(MARK_END)
    assert "| 32 | 2 |" in section and "| safety_in |" in section


def two_stacks() -> dict[str, Any]:
    """A native run and its vLLM peer at 1 and 32 streams: vLLM's engine TTFT is half the native one's
    (50 against 100 ms), its client TTFT 300 against 400 ms, its throughput twice."""
    native = {1: [request(ttft_ms=400.0) for _ in range(2)], 32: [request(ttft_ms=400.0) for _ in range(2)]}
    peer = {1: [request(ttft_ms=300.0) for _ in range(2)], 32: [request(ttft_ms=300.0) for _ in range(2)]}
    for ss in peer.values():
        for s in ss:
            s.record["usage"] = {"ttft_ms": 50.0, "tpot_ms": 5.0}
            s.t_end_ns -= 600 * MS  # the same 8 tokens, done 400 ms after the first instead of 1,000
    engine = {"threads": 1, "dtype": "native", "load_s": 9.0, "levels": {"1": {"tok_s": 8.0}, "32": {"tok_s": 8.0}}}
    vllm = {"kind": "vllm", "dtype": "float32", "version": "0.32.0", "load_s": 30.0, "load": "1.50"}
    vllm["levels"] = {"1": {"tok_s": 16.0}, "32": {"tok_s": 32.0}}
    r: dict[str, Any] = {"load": "0.50", "ready_s": 20.0, **summarize(native, engine)}
    r["vllm"] = {"load": "1.70", "eager": True, "ready_s": 45.0, **summarize(peer, vllm)}
    return r


def test_the_vllm_peer_is_compared_level_by_level() -> None:
    r = two_stacks()
    ratios = compare(r)
    assert list(ratios) == ["1", "32"]
    got = dict(zip((name for name, _ in COMPARED), ratios["1"], strict=True))
    assert got["client TTFT"] == pytest.approx(0.75)  # 300 / 400 ms
    assert got["engine TTFT"] == pytest.approx(0.5) and got["engine TPOT"] == pytest.approx(0.5)
    assert got["pipeline-added TTFT"] == pytest.approx(250 / 300)  # (300 - 50) / (400 - 100)
    assert got["engine alone tok/s"] == pytest.approx(2.0)
    # Both stacks' requests start together: 16 tokens by 2.4 s after against 1.7 s after (1.4 s against 0.7 s).
    assert got["API tok/s"] == pytest.approx(2.0)
    # A failed peer (no levels) compares nothing.
    r["vllm"] = {"note": "the stack on a vLLM replica failed: boom", "engine": {}}
    assert compare(r) == {}


def test_the_vllm_rows_sit_beside_the_native_ones() -> None:
    section = render(8, two_stacks())
    lines = section.splitlines()
    native = next(i for i, line in enumerate(lines) if line.startswith("| 32 | 2 |"))
    assert lines[native + 1].startswith("| 32 (vLLM) | 2 | 300 / 300 | 50 / 50 |")
    assert "| 1 | 0.750x | 0.500x | 0.833x | 0.500x | 2.000x | 2.000x |" in lines
    assert "| target | measured | met | vLLM replica | met | wanted |" in lines
    assert "| stage | 1 stream | 32 streams | 1 stream (vLLM) | 32 streams (vLLM) |" in lines
    assert any(
        "vLLM 0.32.0 CPU build, weights float32" in line and "eager (`SWITCHYARD_VLLM_ENFORCE_EAGER=1`" in line
        for line in lines
    )
    assert any(line.startswith("On the vLLM replica a client waits 300.0 ms") for line in lines)
    # Without the peer the section is the native one alone, as before.
    r = two_stacks()
    del r["vllm"]
    alone = render(8, r)
    assert "(vLLM)" not in alone and "| target | measured | wanted | met |" in alone.splitlines()


def test_a_failed_vllm_peer_is_a_note() -> None:
    r = two_stacks()
    r["vllm"] = {"load": "2.00", "eager": True, "note": "the stack on a vLLM replica failed: boom", "engine": {}}
    section = render(8, r)
    assert "- vLLM replica: the stack on a vLLM replica failed: boom" in section.splitlines()
    assert "(vLLM) |" not in section and "| target | measured | wanted | met |" in section


def test_the_vllm_peer_runs_where_its_virtualenv_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def args(vllm: bool | None, url: str | None = None) -> Any:
        return type("Args", (), {"vllm": vllm, "url": url})()

    monkeypatch.setenv("VLLM_VENV", str(tmp_path))
    assert vllm_wanted(args(None)) is None  # no virtualenv: off by default
    with pytest.raises(SystemExit):
        vllm_wanted(args(True))  # asked for, and missing
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    assert vllm_wanted(args(None)) == str(tmp_path / "bin" / "python")
    assert vllm_wanted(args(False)) is None
    assert vllm_wanted(args(True, url="http://127.0.0.1:8000")) is None  # a running stack's replicas are its own
    env = vllm_env(eager=True)
    assert env["SWITCHYARD_INFERENCE_ENGINE"] == "vllm" and env["SWITCHYARD_VLLM_ENFORCE_EAGER"] == "1"
    assert str(ROOT) in env["PYTHONPATH"].split(":")


@pytest.mark.e2e
@pytest.mark.slow
def test_a_tiny_run_against_the_real_stack(tmp_path: Path) -> None:
    out, js = tmp_path / "benchmarks.md", tmp_path / "result.json"
    # The native stack alone: the vLLM peer (on by default where its virtualenv exists) starts a
    # second stack and vLLM itself, minutes on 2 cores.
    cmd = [
        sys.executable,
        "-m",
        "bench.pipeline_bench",
        "--levels",
        "1",
        "--tokens",
        "6",
        "--requests",
        "1",
        "--no-vllm",
    ]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--json", str(js)], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(js.read_text())
    level = r["levels"]["1"]
    assert level["requests"] == 1 and level["error_count"] == 0, level["errors"]
    assert level["completion_tokens"] == [6]  # ignore_eos reached the engine: the asked length, exactly
    for key in ("client_ttft_ms", "engine_ttft_ms", "added_ttft_ms", "engine_tpot_ms", "deltas_per_token"):
        assert level[key]["p50"] is not None, key
    assert level["api_tok_s"] > 0 and level["engine_alone"]["tok_s"] > 0
    assert r["engine"]["threads"] >= 1
    # Every stage up to the first token is found in the spans, and the shares account for the whole wait.
    stages = level["stages"]
    for name in ("context", "safety_in", "router", "tools", "inference queue + prefill"):
        assert stages[name]["adds_p50"] is not None and stages[name]["own_p50"] is not None, name
    total = sum(v["adds_p50"] or 0.0 for v in stages.values())
    assert total == pytest.approx(level["client_ttft_ms"]["p50"], abs=0.5)
    text = out.read_text()
    assert MARK_BEGIN in text and "### Pipeline benchmark" in text and "| 1 | 1 |" in text


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.vllm
def test_a_tiny_run_with_the_vllm_peer(tmp_path: Path) -> None:
    """The same tiny run with vLLM as a peer: vLLM alone and the stack on a vLLM replica (eager) measured
    beside the native stack, in one section."""
    from bench.vllm_bench import vllm_python

    if vllm_python() is None:
        if REQUIRED:
            pytest.fail("SWITCHYARD_TEST_VLLM=1 but there is no vLLM environment (make setup-vllm)")
        pytest.skip("no vLLM environment: `make setup-vllm` to run this")
    out, js = tmp_path / "benchmarks.md", tmp_path / "result.json"
    cmd = [sys.executable, "-m", "bench.pipeline_bench", "--levels", "1", "--tokens", "6", "--requests", "1", "--vllm"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--json", str(js)], cwd=ROOT, capture_output=True, text=True, timeout=840
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(js.read_text())
    peer = r["vllm"]
    assert "note" not in peer and "note" not in peer["engine"], (peer.get("note"), peer["engine"].get("note"))
    assert peer["engine"]["kind"] == "vllm" and peer["eager"] is True and peer["ready_s"] > 0
    level = peer["levels"]["1"]
    assert level["requests"] == 1 and level["error_count"] == 0, level["errors"]
    assert level["completion_tokens"] == [6]  # ignore_eos reached vLLM through the stack
    assert level["engine_ttft_ms"]["p50"] is not None and level["api_tok_s"] > 0
    assert level["engine_alone"]["tok_s"] > 0
    assert r["levels"]["1"]["error_count"] == 0  # the native stack ran too, in the same run
    text = out.read_text()
    assert "| 1 (vLLM) | 1 |" in text and "vLLM / native" in text
