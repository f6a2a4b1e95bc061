"""The engine benchmark's bookkeeping: merging rounds and judging targets (no engine runs here)."""

import argparse

from bench.engine_bench import _targets, best


def test_rounds_keep_the_best_of_each_figure():
    a = {"decode_tok_s": 50.0, "agg_32": 300.0, "ttft_s": 0.08, "peak_rss_mb": 900.0, "ttfts": [0.1, 0.2]}
    b = {"decode_tok_s": 60.0, "agg_32": 280.0, "ttft_s": 0.05, "peak_rss_mb": 950.0, "ttfts": [0.12, 0.15]}
    m = best(a, b)
    assert m == {"decode_tok_s": 60.0, "agg_32": 300.0, "ttft_s": 0.05, "peak_rss_mb": 950.0, "ttfts": [0.1, 0.15]}
    assert best({"note": "failed"}, a) == a and best(a, {"note": "failed"}) == a


def test_targets_are_ratios_against_the_same_run():
    args = argparse.Namespace(dtypes=["auto"], streams=[1, 32], turns=10)
    r = {
        "native": {"auto": {"decode_tok_s": 60.0, "agg_32": 400.0, "peak_rss_mb": 900.0}},
        "hf": {"agg_32": 250.0},
        "lcpp": {"decode_tok_s": 100.0, "peak_rss_mb": 500.0},
        "lcpp_batched": {"agg_32": 320.0},
        "turns": {"on": {"ttfts": [0.05] + [0.06] * 8 + [0.08]}},
    }
    table = _targets(args, r)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert "0.600x" in rows["single-stream decode vs llama-cpp-python"] and rows[
        "single-stream decode vs llama-cpp-python"
    ].endswith("| no |")
    assert "4.000x" in rows["32 streams vs llama-cpp-python single stream"]
    assert rows["32 streams vs transformers at 32"].endswith("| no |")  # 1.6x < 2x
    peer = "32 streams vs the better of llama.cpp's batched decode and vLLM at 32"
    assert "1.250x" in rows[peer] and rows[peer].endswith("| yes |")
    assert "1.800x" in rows["peak memory vs llama-cpp-python"] and rows["peak memory vs llama-cpp-python"].endswith(
        "| no |"
    )
    r["vllm"] = {"agg_32": 400.0}  # the better peer is the one judged against
    assert "1.000x" in _targets(args, r).split(peer)[1].splitlines()[0]
    assert "1.60x" in rows["turn-10 TTFT vs turn 1, prefix caching on"] and rows[
        "turn-10 TTFT vs turn 1, prefix caching on"
    ].endswith("| no |")
    # A missing baseline is neither met nor failed.
    r["lcpp"] = {"note": "not installed"}
    assert "| - | ≥ 1.0x | - |" in _targets(args, r)
    del r["lcpp_batched"], r["vllm"]
    assert "| - | ≥ 1.2x | - |" in _targets(args, r)


def test_an_avx2_run_writes_its_own_section(tmp_path):
    from bench.engine_bench import AVX2_BEGIN, AVX2_END, MARK_BEGIN, render
    from bench.report import write_section

    args = argparse.Namespace(
        dtypes=["auto"], streams=[1, 32], turns=10, max_tokens=32, rounds=1, isa="avx2", llama_cpp_path="/opt/lcpp-avx2"
    )
    res = {"decode_tok_s": 60.0, "agg_1": 60.0, "agg_32": 400.0, "peak_rss_mb": 900.0, "dtype": "native"}
    r = {"load": "0.1", "native": {"auto": res}, "turns": {}, "hf": {}, "lcpp": {}, "lcpp_batched": {}}
    section = render(args, r)
    assert section.startswith(AVX2_BEGIN) and section.rstrip().endswith(AVX2_END)
    assert "ATEN_CPU_CAPABILITY=avx2" in section and "/opt/lcpp-avx2" in section
    out = tmp_path / "b.md"
    out.write_text(f"# B\n\n{MARK_BEGIN}\nthe main table\n<!-- engine_bench:end -->\n")
    write_section(str(out), AVX2_BEGIN, AVX2_END, section)
    write_section(str(out), AVX2_BEGIN, AVX2_END, section)  # a second run replaces, not appends
    text = out.read_text()
    assert "the main table" in text and text.count(AVX2_BEGIN) == 1
