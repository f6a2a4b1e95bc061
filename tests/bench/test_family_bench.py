"""bench/family_bench.py: what can be checked without its minutes of converter runs and timing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from bench import family_bench as fb
from tests.engine.make_family_reference import gguf_file

PAGE = """# Benchmarks

## AMX class: Intel Xeon, 2 cores

amx text

## AVX-512 class: AMD EPYC (Zen 4), 2 cores

avx512 text

## AVX2 class

avx2 text

## GPU: NVIDIA H200
"""


def _results(value: float) -> dict:
    return {
        f: {1: {"native": value, "llama_cpp": 100.0}, 32: {"native": 2 * value, "llama_cpp": 100.0}}
        for f in fb.FAMILIES
    }


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def _section(value: float, key: str = "avx512", name: str = "AVX-512") -> str:
    return fb.render(
        _results(value), key=key, name=name, when="2026-01-01 00:00 UTC", mach="m", command="python x", info="i"
    )


def test_the_table_lands_in_its_class_part_and_a_rerun_replaces_it(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text(PAGE)
    fb.write(str(out), _section(150.0), "avx512", "AVX-512")
    text = out.read_text()
    part = text.split("## AVX-512 class", 1)[1].split("\n## ", 1)[0]
    assert "### Model families" in part and "avx512 text" in part
    assert part.index("avx512 text") < part.index("### Model families")
    assert "| qwen3 | QK-norm, head_dim 64 | 150.0 | 100.0 | 1.50x | 6.67 / 10.00 | 300.0 | 100.0 | 3.00x |" in part
    fb.write(str(out), _section(50.0), "avx512", "AVX-512")
    again = out.read_text()
    assert again.count("### Model families") == 1 and "| 0.50x |" in again and "1.50x" not in again
    # Every other part is untouched, and another class gets a table of its own.
    assert _lines(again.replace(_section(50.0), "")) == _lines(PAGE)
    fb.write(str(out), _section(80.0, "avx2", "AVX2"), "avx2", "AVX2")
    final = out.read_text()
    assert final.count("### Model families") == 2
    avx2 = final.split("## AVX2 class", 1)[1].split("\n## ", 1)[0]
    assert "0.80x" in avx2 and "## GPU: NVIDIA H200" in final


def test_the_cpu_class_is_the_widest_extension():
    assert fb.cpu_class(frozenset({"avx2", "avx512f", "amx_tile"})) == ("amx", "AMX")
    assert fb.cpu_class(frozenset({"avx2", "avx512f"})) == ("avx512", "AVX-512")
    assert fb.cpu_class(frozenset({"avx2"})) == ("avx2", "AVX2")


@pytest.mark.parametrize("family", fb.FAMILIES)
def test_the_overrides_give_smollm2_135m_shape(family):
    """The config write_checkpoint builds from the family's fields and the overrides (no weights)."""
    transformers = pytest.importorskip("transformers")
    from tests.hf_models import _family

    config_class, kwargs = _family(family, fb.VOCAB, 1, 2)
    cfg = getattr(transformers, config_class)(**{**kwargs, **fb.overrides(family)})
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size) == (576, 30, 1536)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size) == (9, 3, 49152)
    assert (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads) == 64
    if family == "llama3":
        assert (cfg.rope_scaling or {}).get("rope_type") == "llama3"
    # A different shape is a different cached file.
    assert fb.gguf_path(family, "c") != fb.gguf_path("qwen2" if family != "qwen2" else "qwen3", "c")


@pytest.mark.parametrize("engine", sorted(fb.WORKERS))
def test_each_worker_runs_on_a_small_family_gguf(engine):
    """Both workers, single stream and batched, on the committed small Qwen 3 Q8_0 file."""
    if engine == "llama_cpp" and importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    if engine == "native":
        native = pytest.importorskip("switchyard.libs.engine.native")
        if not native.available():
            pytest.skip(native.unavailable_reason())
    for streams in (1, 3):
        res = fb.spawn(engine, gguf_file("qwen3", "q8_0"), 1, 6, streams)
        assert res["tok_s"] > 0


CONVERTER = os.path.join(fb.CACHE, f"llama_cpp_python-{fb.LLAMA_CPP_VERSION}", "vendor", "llama.cpp")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(CONVERTER), reason="llama.cpp's converter is not fetched (bench/family_bench.py)")
def test_a_converted_file_carries_the_overrides(tmp_path):
    """The build path at the suite's small shape, Qwen 3's head_dim overridden: what the GGUF says."""
    from gguf import GGUFReader

    if importlib.util.find_spec("sentencepiece") is None and not os.path.isdir(os.path.join(fb.CACHE, "convdeps")):
        pytest.skip("sentencepiece is not installed for the converter")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(fb.CACHE, "convdeps"), os.getcwd()])}
    out = str(tmp_path / "q.gguf")
    code = f"from bench.family_bench import build_gguf; build_gguf('qwen3', {CONVERTER!r}, {out!r}, head_dim=16)"
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    fields = GGUFReader(out, "r").fields
    assert fields["qwen3.attention.key_length"].contents() == 16
    assert len(fields["tokenizer.ggml.tokens"].contents()) == fb.VOCAB
    assert json.dumps(fields["general.name"].contents()) == '"random test checkpoint"'
