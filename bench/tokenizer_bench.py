"""Tokens per second: our tokenizer (switchyard/libs/tokenizer, Hugging Face `tokenizers` inside) against
llama.cpp's (llama-cpp-python, vocab only), on the tokenizer corpus, for both bundled vocabularies.

    python bench/tokenizer_bench.py [--out docs/benchmarks.md] [--rounds 5]

Two shapes: every corpus text encoded by its own call (a chat message's size: per-call overhead
counts), and the whole corpus joined into one text (throughput on long input). Each cell is the best
of --rounds; one thread, the same process, the same texts. Needs llama_cpp importable (the baseline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import importlib.util
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import machine, write_section
from switchyard.libs.tokenizer import load_tokenizer
from tests.tokenizer.models import BASES, load_corpus

MARK_BEGIN = "<!-- tokenizer_bench:begin -->"
MARK_END = "<!-- tokenizer_bench:end -->"


def best_rate(run: Callable[[], int], rounds: int, setup: Callable[[], object] = lambda: None) -> tuple[float, int]:
    """(tokens per second of the fastest round, tokens per round)."""
    best, tokens = float("inf"), 0
    for _ in range(rounds):
        setup()
        t0 = time.perf_counter()
        tokens = run()
        best = min(best, time.perf_counter() - t0)
    return tokens / best, tokens


def bench(key: str, texts: list[str], rounds: int) -> list[str]:
    import llama_cpp

    path = BASES[key]()
    ours = load_tokenizer(path)
    llm = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    raw = [t.encode("utf-8") for t in texts]
    joined = "\n".join(texts)
    joined_raw = joined.encode("utf-8")
    # Same ids, or the comparison is meaningless.
    assert ours.encode(joined, add_bos=False) == llm.tokenize(joined_raw, add_bos=False, special=True)
    rows = []
    for shape, run_ours, run_llama in (
        (
            f"{len(texts)} texts, one call each",
            lambda: sum(len(ours.encode(t, add_bos=False)) for t in texts),
            lambda: sum(len(llm.tokenize(b, add_bos=False, special=True)) for b in raw),
        ),
        (
            f"the corpus as one text ({len(joined_raw) // 1024} KiB)",
            lambda: len(ours.encode(joined, add_bos=False)),
            lambda: len(llm.tokenize(joined_raw, add_bos=False, special=True)),
        ),
    ):
        # HF's BPE caches each word's tokens; every round starts cold, as llama.cpp (no cache) does.
        r_ours, n = best_rate(run_ours, rounds, ours._backend.model._clear_cache)
        r_llama, _ = best_rate(run_llama, rounds)
        rows.append(
            f"| {key} ({ours.vocab_type}) | {shape} | {n} | {r_ours:,.0f} | {r_llama:,.0f} | {r_ours / r_llama:.2f}x |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    if importlib.util.find_spec("llama_cpp") is None:
        print("tokenizer bench skipped: llama_cpp (its baseline) is not installed")
        return
    texts = load_corpus()
    rows = []
    for key in BASES:
        rows += bench(key, texts, args.rounds)
    versions = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in ("tokenizers", "llama-cpp-python"))
    section = "\n".join(
        [
            MARK_BEGIN,
            "### Tokenizer speed",
            "",
            f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
            f"- machine: {machine()}; load average at start {os.getloadavg()[0]:.2f} (a shared machine)",
            f"- command: `python bench/tokenizer_bench.py --out docs/benchmarks.md --rounds {args.rounds}`",
            f"- {versions}; ids identical to llama.cpp's (checked on the joined text before timing); "
            f"best of {args.rounds} rounds, one thread; our BPE word cache cleared before every round",
            "",
            "| vocabulary | input | tokens | ours tok/s | llama.cpp tok/s | ours / llama.cpp |",
            "|---|---|---|---|---|---|",
            *rows,
            MARK_END,
        ]
    )
    if args.out:
        write_section(args.out, MARK_BEGIN, MARK_END, section)
    print(section)


if __name__ == "__main__":
    main()
