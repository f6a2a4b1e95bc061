"""Evaluate the input guard on ``data/eval.jsonl``: ``python -m libs.safety.eval``.

A category counts as detected for an example when the guard returns a flag or block verdict of
that category. Precision and recall are per category; the benign false-positive rate is the
share of benign messages that got any flag or block at all.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from libs.safety.classifier import EmbeddingClassifier
from libs.safety.guard import InputGuard
from libs.safety.policy import SafetyPolicy
from libs.safety.taxonomy import BENIGN, BLOCK, CATEGORY_NAMES, worst_action

DATA = Path(__file__).resolve().parent / "data"


def evaluate(guard: InputGuard, rows: list[dict[str, str]], source: str = "user") -> dict[str, object]:
    t0 = time.time()
    verdicts = guard.check_many([r["text"] for r in rows], source=source)
    elapsed = time.time() - t0
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    n: Counter[str] = Counter()
    blocked: Counter[str] = Counter()
    benign_hits: list[str] = []
    benign_flag = benign_block = 0
    for r, vs in zip(rows, verdicts, strict=True):
        label = r["label"]
        n[label] += 1
        found = {v.category for v in vs}
        for c in found:
            if c == label:
                tp[c] += 1
            else:
                fp[c] += 1
        if worst_action(vs) == BLOCK:
            blocked[label] += 1
        if label == BENIGN and vs:
            benign_flag += 1
            benign_block += worst_action(vs) == BLOCK
            benign_hits.append(f"{vs[0].category}:{vs[0].action}:{vs[0].score:.2f}  {r['text'][:90]}")
    cats = [c for c in CATEGORY_NAMES if n[c] or fp[c]]
    per = {
        c: {
            "n": n[c],
            "precision": tp[c] / (tp[c] + fp[c]) if tp[c] + fp[c] else None,
            "recall": tp[c] / n[c] if n[c] else None,
            "blocked": blocked[c] / n[c] if n[c] else None,
        }
        for c in cats
    }
    nb = n[BENIGN]
    return {
        "version": guard.version,
        "source": source,
        "examples": len(rows),
        "seconds": round(elapsed, 1),
        "per_category": per,
        "benign_n": nb,
        "benign_fpr": benign_flag / nb if nb else None,
        "benign_block_rate": benign_block / nb if nb else None,
        "benign_false_positives": benign_hits,
    }


def _pct(x: object) -> str:
    return "  -  " if x is None else f"{100 * float(x):5.1f}"  # type: ignore[arg-type]


def render(res: dict[str, object]) -> str:
    lines = [
        f"guard {res['version']}  source={res['source']}  {res['examples']} examples in {res['seconds']}s",
        "",
        "| category | name | n | precision % | recall % | blocked % |",
        "|---|---|---:|---:|---:|---:|",
    ]
    per: dict[str, dict[str, float | None]] = res["per_category"]  # type: ignore[assignment]
    for c, m in per.items():
        lines.append(
            f"| {c} | {CATEGORY_NAMES[c]} | {m['n']} | {_pct(m['precision'])} | {_pct(m['recall'])} "
            f"| {_pct(m['blocked'])} |"
        )
    lines += [
        "",
        f"benign messages: {res['benign_n']}; false-positive rate (any flag or block): "
        f"{_pct(res['benign_fpr']).strip()}%; blocked: {_pct(res['benign_block_rate']).strip()}%",
    ]
    hits: list[str] = res["benign_false_positives"]  # type: ignore[assignment]
    lines += [f"  FP  {h}" for h in hits]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, nargs="+", default=[DATA / "eval.jsonl"], help="one or more JSONL files")
    ap.add_argument("--weights", type=Path, default=None, help="classifier weights (default: the shipped file)")
    ap.add_argument("--rules-only", action="store_true", help="evaluate the guard without embeddings")
    ap.add_argument("--source", default="user", choices=["user", "file", "tool"])
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    args = ap.parse_args()
    clf = EmbeddingClassifier(args.weights) if args.weights and not args.rules_only else None
    guard = InputGuard(SafetyPolicy(), use_embeddings=not args.rules_only, classifier=clf)
    for i, path in enumerate(args.data):
        with path.open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        res = evaluate(guard, rows, args.source)
        if len(args.data) > 1:
            print(("\n" if i else "") + f"== {path.name}")
        print(json.dumps(res, indent=2) if args.json else render(res))


if __name__ == "__main__":
    main()
