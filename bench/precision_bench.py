"""The output check's classifier cost per answer sentence and token in each precision, and how far int8
and bf16 scores move from fp32's.

    python -m bench.precision_bench [--rounds 2] [--isa native|avx2] [--max-answers 40]

Sentences are cut from the answers as safety_out cuts them (``StreamGuard``; the sets of
``bench.screen_bench``) and scored in passes of ``--batch`` on one torch thread, as safety_out's batcher
scores them. The shipped classifier's MiniLM is loaded in fp32, bf16 and int8 (``Embedder(dtype=...)``)
in this one process and the three alternate pass set by pass set, ``--rounds`` times: the machine's load
drifts, the ratios hold. CPU is this thread's (``time.thread_time``), the best round's.

``--isa avx2`` reruns itself with torch, oneDNN, MKL and fbgemm (int8) held to AVX2: the AVX2 class's
figures on this machine (bf16 there is emulated).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.screen_bench import AVX2_ENV, answer_sets, sentences

# fbgemm (int8 Linear) reads its own variable, not torch's.
ISA_ENV = AVX2_ENV | {"FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}
DTYPES = ("fp32", "bf16", "int8")


def run(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from switchyard.libs.embeddings import Embedder
    from switchyard.libs.safety.classifier import EmbeddingClassifier, adapter_deltas, split_texts
    from switchyard.libs.safety.taxonomy import BENIGN

    torch.set_num_threads(1)
    base = EmbeddingClassifier()
    clfs = {}
    for dtype in DTYPES:
        clf = clfs[dtype] = EmbeddingClassifier()
        clf._embedder = Embedder(weight_deltas=adapter_deltas(base.adapters), dtype=dtype)
        clf.score_pieces(["warm up"] * 8)
    benign = base.classes.index(BENIGN)
    print(f"isa {torch.backends.cpu.get_cpu_capability()}; passes of {args.batch}; load {os.getloadavg()[0]:.1f}")
    for name, texts in answer_sets().items():
        sents, tokens = sentences(texts[: args.max_answers or None])
        pieces = split_texts(sents)[0]
        passes = [pieces[i : i + args.batch] for i in range(0, len(pieces), args.batch)]
        cpu: dict[str, list[float]] = {d: [] for d in DTYPES}
        harm: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):
            for dtype, clf in clfs.items():
                t = time.thread_time()
                rows = [row for p in passes for row in clf.score_pieces(p)]
                cpu[dtype].append(time.thread_time() - t)
                harm[dtype] = 1 - np.array(rows)[:, benign]
        line = f"{name}: {len(pieces)} sentences, {tokens} tokens"
        for dtype in DTYPES:
            best = min(cpu[dtype])
            line += f" | {dtype} {best * 1e6 / len(pieces):.0f} µs/sentence, {best * 1e6 / tokens:.1f} µs/token"
        for dtype in ("bf16", "int8"):
            d = np.abs(harm[dtype] - harm["fp32"])
            line += f" | {dtype}-fp32 harm score: max {d.max():.3f}, mean {d.mean():.4f}"
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="sentences per classifier pass")
    ap.add_argument("--isa", default="native", choices=["native", "avx2"])
    ap.add_argument("--max-answers", type=int, default=40, help="the first N answers of each set (0: all)")
    args = ap.parse_args()
    if args.isa == "avx2" and os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS") != "AVX2":
        # The kernels are chosen when torch loads: a fresh interpreter with the ISA held down.
        sys.exit(
            subprocess.call([sys.executable, "-m", "bench.precision_bench", *sys.argv[1:]], env=os.environ | ISA_ENV)
        )
    run(args)


if __name__ == "__main__":
    main()
