"""The output check's classifier cost per answer token, with and without its early exit (the screen).

    python -m bench.screen_bench [--rounds 3] [--isa native|avx2] [--json FILE]

Answers stream through ``StreamGuard`` as safety_out feeds it (token-sized pieces, ``eval.token_pieces``),
and the sentences it hands out for judging are scored the way safety_out's batcher scores them at load:
in passes of ``--batch`` sentences, on one torch thread. Per pass: MiniLM's first layers and the screen's
head over all of them, the rest of MiniLM over those it escalates (screen on), or the whole of MiniLM over
all of them (screen off). The two alternate
pass set by pass set, ``--rounds`` times, in this one process: the machine's load drifts, the ratio holds.
CPU is this thread's (``time.thread_time``), per answer token (``token_pieces``).

Answer sets: the everyday answers of ``data/safety/ood/answers.jsonl``, the shipped model's answers to the
eval's benign prompts where ``make eval-safety`` cached them, and the harmful passages of the eval.

``--isa avx2`` reruns itself with torch, oneDNN and MKL held to AVX2 and MiniLM in fp32 (what an AVX2
CPU without native bf16 serves): the AVX2 class's figure on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def answer_sets() -> dict[str, list[str]]:
    from training.safety.eval import ANSWER_CACHE, answer_set
    from training.safety.ood import ANSWERS

    with ANSWERS.open(encoding="utf-8") as fh:
        ood = [json.loads(line)["text"] for line in fh if line.strip()]
    sets = {"everyday answers (ood)": ood}
    if ANSWER_CACHE.exists():
        rows = [json.loads(line) for line in ANSWER_CACHE.read_text(encoding="utf-8").splitlines() if line.strip()]
        sets["model answers (eval prompts)"] = [r["answer"] for r in rows]
    sets["harmful passages (eval)"] = [t for ts in answer_set("harmful", "all").values() for t in ts]
    return sets


def sentences(texts: list[str]) -> tuple[list[str], int]:
    """What safety_out hands the classifier for these answers, and how many answer tokens they came in."""
    from training.safety.eval import token_pieces
    from training.safety.screen import answer_sentences

    return answer_sentences(texts), sum(len(token_pieces(t)) for t in texts)


def run(args: argparse.Namespace) -> dict[str, object]:
    import torch

    from switchyard.libs.embeddings import Embedder
    from switchyard.libs.safety.classifier import EmbeddingClassifier, adapter_deltas, split_texts
    from switchyard.libs.safety.guard import screen_for

    torch.set_num_threads(1)
    clf = EmbeddingClassifier()
    dtype = "fp32" if args.isa == "avx2" else "auto"
    clf._embedder = Embedder(weight_deltas=adapter_deltas(clf.adapters), dtype=dtype)
    screen = screen_for(clf)
    clf.score_pieces(["warm up"] * 8)
    clf.score_pieces(["warm up"] * 8, screen=screen)
    results: dict[str, object] = {"isa": args.isa, "dtype": clf.embedder.dtype, "batch": args.batch, "sets": {}}
    for name, texts in answer_sets().items():
        texts = texts[: args.max_answers or None]
        sents, tokens = sentences(texts)
        pieces = split_texts(sents)[0]
        passes = [pieces[i : i + args.batch] for i in range(0, len(pieces), args.batch)]
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        before = screen.screened, screen.escalated
        for _ in range(args.rounds):
            for mode in ("off", "on"):
                t = time.thread_time()
                for p in passes:
                    clf.score_pieces(p, screen=screen if mode == "on" else None)
                cpu[mode].append((time.thread_time() - t) * 1e6 / tokens)
        off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        row = {
            "answers": len(texts),
            "tokens": tokens,
            "chunks": len(pieces),
            "escalated_share": (screen.escalated - before[1]) / max(screen.screened - before[0], 1),
            "us_per_token_off": off,
            "us_per_token_on": on,
            "ratio": off / on if on else None,
            "rounds_off": cpu["off"],
            "rounds_on": cpu["on"],
        }
        results["sets"][name] = row  # type: ignore[index]
        print(
            f"{args.isa} {name}: {len(texts)} answers, {tokens} tokens, {len(pieces)} chunks; escalated "
            f"{100 * row['escalated_share']:.1f} %; µs/token off {off:.1f}, on {on:.1f} ({row['ratio']:.1f}x)",
            flush=True,
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--batch", type=int, default=64, help="sentences per classifier pass (safety_out's max_batch_texts)"
    )
    ap.add_argument("--isa", default="native", choices=["native", "avx2"])
    ap.add_argument("--max-answers", type=int, default=0, help="the first N answers of each set (0: all)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.isa == "avx2" and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        # The kernels are chosen when torch loads: a fresh interpreter with the ISA held down.
        sys.exit(
            subprocess.call([sys.executable, "-m", "bench.screen_bench", *sys.argv[1:]], env=os.environ | AVX2_ENV)
        )
    res = run(args)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
