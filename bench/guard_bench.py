"""Output safety's stream guard alone: CPU per answer token outside the classifier, by part.

    python -m bench.guard_bench [--answers 400] [--rounds 5] [--compare BASE_DIR] [--out docs/benchmarks.md]

Answers as safety_out sees them: the simulated engine's sentences (what `bench.stage_bench --engine sim`
streams), the out-of-distribution answers (data/safety/ood/answers.jsonl) and the benign answer sets
(data/safety/answers/), each cut into the shipped tokenizer's token texts and fed one token per `feed`,
through a `StreamGuard` built as safety_out builds it (holdback 0, `stream` release, classifier judging
off the token path: `judge_inline=False`, every handed-out sentence answered with no verdict), then
`finish` and the record's `record_verdicts`. The classifier itself never runs.

`--compare BASE_DIR` times the guard of another checkout (a `switchyard/` package under BASE_DIR, e.g.
`git worktree add /tmp/base <commit>`) and this one in alternated child processes, round by round, on the
same token texts: the ratio is what a change did, the absolute figures drift with the machine's load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARK_BEGIN = "<!-- guard_bench:begin -->"
MARK_END = "<!-- guard_bench:end -->"
# The functions timed separately (module, owner, attribute); absent ones are skipped, so a checkout with
# other internals still reports its total.
PARTS = {
    "rules": ("switchyard.libs.safety.guard", None, "rule_hits"),
    "pii": ("switchyard.libs.safety.stream", None, "find_pii"),
    "secrets": ("switchyard.libs.safety.redact", None, "find_secrets"),
    "safe cut": ("switchyard.libs.safety.stream", "StreamGuard", "_safe_cut"),
    "sentences": ("switchyard.libs.safety.stream", "StreamGuard", "_take_sentences"),
}


def answer_texts(limit: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from switchyard.libs.engine.sim_text import SENTENCES
    from training.safety.eval import answer_set

    texts = [" ".join(SENTENCES[i : i + 6]) for i in range(0, len(SENTENCES), 3)]
    with open(ROOT / "data/safety/ood/answers.jsonl") as fh:
        texts += [json.loads(line)["text"] for line in fh]
    texts += [a for items in answer_set("benign", "all").values() for a in items]
    return texts[:limit]


def token_texts(texts: list[str]) -> list[list[str]]:
    """Each text as the shipped tokenizer streams it: one decoded token at a time."""
    from switchyard.libs.tokenizer import load_tokenizer
    from switchyard.libs.tokenizer.paths import default_model_path

    tok = load_tokenizer(default_model_path(), None)
    return [[tok.decode([i]) for i in tok.encode(t)] for t in texts]


def _stream_all(answers: list[list[str]]) -> tuple[int, int]:
    """Feed every answer through a service-built guard; (tokens, blocked answers)."""
    from switchyard.libs.safety import InputGuard, StreamGuard
    from switchyard.libs.safety.calibration import shipped_calibration
    from switchyard.libs.safety.policy import SafetyPolicy

    # As `calibrated_guard` builds it, without loading the classifier (never called here).
    guard = InputGuard(SafetyPolicy.calibrated(shipped_calibration()), use_embeddings=True)
    tokens = blocked = 0
    for pieces in answers:
        sg = StreamGuard(holdback_chars=0, guard=guard, release="stream", judge_inline=False)
        rels = [sg.feed(p) for p in pieces]
        rels.append(sg.finish())
        for rel in rels:
            for s in rel.to_judge:
                sg.judged(s, [])
        sg.record_verdicts()
        tokens += len(pieces)
        blocked += sg.blocked is not None
    return tokens, blocked


def _timed_parts() -> dict[str, list[float]]:
    """Wrap each part with a timer; nested parts (secrets inside pii) are reported on their own too."""
    import importlib

    spent: dict[str, list[float]] = {}
    for name, (module, owner, attr) in PARTS.items():
        mod = importlib.import_module(module)
        host = getattr(mod, owner) if owner else mod
        fn = getattr(host, attr, None)
        if fn is None:
            continue
        acc = spent.setdefault(name, [0.0])

        def timed(*a: Any, _fn: Any = fn, _acc: list[float] = acc, **kw: Any) -> Any:
            t = time.process_time()  # CPU, not wall: the machine is shared
            out = _fn(*a, **kw)
            if hasattr(out, "__next__"):  # a generator: its work happens while it is consumed
                out = list(out)
            _acc[0] += time.process_time() - t
            return out

        setattr(host, attr, timed)
    return spent


def child(root: str, pieces_file: str, parts: bool) -> None:
    sys.path.insert(0, root)
    import switchyard

    assert Path(switchyard.__file__).resolve().is_relative_to(Path(root).resolve()), switchyard.__file__
    answers = json.loads(Path(pieces_file).read_text())
    spent = _timed_parts() if parts else {}
    _stream_all(answers[:20])  # warm: regex caches, imports
    for acc in spent.values():
        acc[0] = 0.0
    t = time.process_time()
    tokens, blocked = _stream_all(answers)
    total = time.process_time() - t
    out = {"us_per_token": total / tokens * 1e6, "tokens": tokens, "blocked": blocked}
    out |= {f"{k} us": v[0] / tokens * 1e6 for k, v in spent.items()}
    print(json.dumps(out))


def run_child(root: Path, pieces_file: Path, parts: bool) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", str(root), "--pieces", str(pieces_file)]
    res = subprocess.run(cmd + (["--parts"] if parts else []), capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answers", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", help="another checkout's root, timed alternately with this one")
    ap.add_argument("--out", help="write the table into this markdown file (docs/benchmarks.md)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--pieces", help=argparse.SUPPRESS)
    ap.add_argument("--parts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.pieces, args.parts)
        return
    sys.path.insert(0, str(ROOT))
    from bench.report import cpu_info, machine, write_section

    pieces_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"guard_bench_pieces_{args.answers}.json"
    if not pieces_file.exists():
        pieces_file.write_text(json.dumps(token_texts(answer_texts(args.answers))))
    roots = {"this": ROOT} | ({"base": Path(args.compare)} if args.compare else {})
    totals: dict[str, list[float]] = {k: [] for k in roots}
    for r in range(args.rounds):
        for name in sorted(roots, key=lambda k: (k != "base") ^ (r % 2 == 1)):  # alternate who goes first
            totals[name].append(run_child(roots[name], pieces_file, parts=False)["us_per_token"])
    parts = {name: run_child(root, pieces_file, parts=True) for name, root in roots.items()}
    med = {k: statistics.median(v) for k, v in totals.items()}
    rows = ["| checkout | µs per token (median of rounds) | rounds | timed run | " + " | ".join(PARTS) + " |"]
    rows.append("|---" * (4 + len(PARTS)) + "|")
    for name in roots:
        cells = [f"{parts[name].get(f'{p} us', float('nan')):.1f}" for p in PARTS]
        rows.append(
            f"| {name} | {med[name]:.1f} | {', '.join(f'{x:.1f}' for x in totals[name])} | "
            f"{parts[name]['us_per_token']:.1f} | " + " | ".join(cells) + " |"
        )
    tokens = parts["this"]["tokens"]
    ratio = f"\nthis / base: {med['this'] / med['base']:.2f}x\n" if "base" in med else "\n"
    print("\n".join(rows) + ratio + f"{tokens:.0f} tokens, {args.answers} answers, {machine()}")
    if args.out:
        section = (
            f"{MARK_BEGIN}\n### Output safety's stream guard per token (`bench.guard_bench`)\n\n"
            f"{dt.date.today()}, {machine()}, `python -m bench.guard_bench --answers {args.answers} "
            f"--rounds {args.rounds}{' --compare BASE' if args.compare else ''}`: {tokens:.0f} tokens "
            "as the shipped tokenizer streams them, one `feed` each, a service-built guard; CPU time, rounds "
            "alternated. Parts are timed in a separate run with wrappers (secrets is inside pii; rules include "
            "the record's pass over the whole answer).\n\n" + "\n".join(rows) + "\n" + ratio + f"\n{MARK_END}\n"
        )
        flags = cpu_info()[1]
        under = "## AVX-512 class" if "avx512f" in flags else "## AVX2 class" if "avx2" in flags else None
        write_section(args.out, MARK_BEGIN, MARK_END, section, under=under)


if __name__ == "__main__":
    main()
