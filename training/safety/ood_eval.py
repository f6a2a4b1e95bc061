"""The out-of-distribution benign sets in ``make eval-safety``: how many everyday prompts input safety
blocks, how many everyday answers output safety stops, and the calibration that decides both.

``calibrate`` chooses the request bars on the ``calib`` part of the prompts plus the benign lines of the
held-out ``holdout`` split (never trained on) and writes the calibration file;
``evaluate_prompts`` and ``evaluate_answers`` score the ``test`` part (or all) against the bars in force.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable

from switchyard.libs.safety.calibration import Bar, Calibration, CalibrationSet, shipped_calibration
from switchyard.libs.safety.classifier import EmbeddingClassifier
from switchyard.libs.safety.guard import InputGuard
from switchyard.libs.safety.policy import LEARNED, SafetyPolicy
from switchyard.libs.safety.rules import normalize
from switchyard.libs.safety.stream import StreamGuard
from switchyard.libs.safety.taxonomy import BENIGN, BLOCK, CATEGORY_NAMES, worst_action
from training.safety.calibrate import CAP, FLOOR, MARGIN, TARGET_FPR, request_bars
from training.safety.ood import PROMPTS, read
from training.safety.splits import split_path

# A labelled split no classifier round trained on; its benign lines join the calibration texts (test10,
# also held out of training, stays out: it checks the bars from outside).
HELD_OUT = ("holdout",)
COMMAND = "python -m training.safety.eval --calibrate"


def calibration_texts() -> dict[str, list[str]]:
    """The benign texts the bars are chosen on, by set."""
    out = {"ood prompts (calib part)": [r["text"] for r in read(PROMPTS, "calib")]}
    for split in HELD_OUT:
        with split_path(split).open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        out[f"{split} benign"] = [r["text"] for r in rows if r["label"] == BENIGN]
    return out


def calibrate(clf: EmbeddingClassifier, base: Calibration | None = None) -> Calibration:
    """New request bars for ``clf`` (answer bars carried over from ``base``, the shipped file by default)."""
    base = base or shipped_calibration()
    sets = calibration_texts()
    texts = [t for ts in sets.values() for t in ts]
    scores = clf.score_many([normalize(t) for t in texts])
    judged = [c for c in LEARNED if c not in SafetyPolicy().data_only]
    start = {c: base.requests.get(c, Bar(flag_at=0.45, block_at=FLOOR)) for c in LEARNED}
    bars = request_bars(scores, start, judged)
    return Calibration(
        classifier=clf.version,
        written=dt.datetime.now(dt.UTC).date().isoformat(),
        command=COMMAND,
        method=(
            f"per category, block at {MARGIN} above the highest benign calibration score once the "
            f"{TARGET_FPR:.1%} highest-scoring calibration texts are set aside, never below {FLOOR} nor above {CAP}; "
            "flag bars unchanged; answer bars carried over"
        ),
        target_fpr=TARGET_FPR,
        margin=MARGIN,
        sets=[CalibrationSet(name=k, n=len(v)) for k, v in sets.items()],
        requests=bars,
        answers=dict(base.answers),
    )


def evaluate_prompts(guard: InputGuard, rows: list[dict[str, str]]) -> dict[str, object]:
    """Everyday prompts judged as a user's own request: blocked and flagged, per kind."""
    t0 = time.time()
    verdicts = guard.check_many([r["text"] for r in rows], source="user")
    per: dict[str, dict[str, int]] = {}
    hits: list[str] = []
    for r, vs in zip(rows, verdicts, strict=True):
        k = per.setdefault(r["kind"], {"n": 0, "blocked": 0, "flagged": 0})
        k["n"] += 1
        if vs:
            blocked = worst_action(vs) == BLOCK
            k["blocked" if blocked else "flagged"] += 1
            v = vs[0]
            hits.append(f"{'BLOCK' if blocked else 'flag '} {v.category}:{v.score:.3f}  {r['id']}  {r['text'][:80]!r}")
    return {
        "seconds": round(time.time() - t0, 1),
        "kinds": per,
        "n": len(rows),
        "blocked": sum(k["blocked"] for k in per.values()),
        "flagged": sum(k["flagged"] for k in per.values()),
        "hits": sorted(hits, reverse=True),
    }


def evaluate_answers(
    guard: InputGuard, rows: list[dict[str, str]], stream: Callable[[InputGuard, str], StreamGuard]
) -> dict[str, object]:
    """Everyday answers streamed through the output guard: stopped and flagged, per kind."""
    per: dict[str, dict[str, int]] = {}
    hits: list[str] = []
    for r in rows:
        k = per.setdefault(r["kind"], {"n": 0, "stopped": 0, "flagged": 0})
        k["n"] += 1
        sg = stream(guard, r["text"])
        if sg.blocked is not None:
            k["stopped"] += 1
            hits.append(f"STOP {sg.blocked.category}:{sg.blocked.score:.3f}  {r['id']}  {r['text'][:80]!r}")
        elif sg.flags:
            k["flagged"] += 1
    return {
        "kinds": per,
        "n": len(rows),
        "stopped": sum(k["stopped"] for k in per.values()),
        "flagged": sum(k["flagged"] for k in per.values()),
        "hits": hits,
    }


def _rate(a: int, n: int) -> str:
    return f"{100 * a / n:.2f} % ({a} of {n})" if n else "-"


def render_calibration(cal: Calibration, policy: SafetyPolicy) -> str:
    lines = [
        f"calibration for {cal.classifier}, written {cal.written} by `{cal.command}`",
        f"method: {cal.method}",
        "sets: " + ", ".join(f"{s.name} {s.n}" for s in cal.sets),
        "",
        "| category | name | request flag_at | request block_at | answer block_at |",
        "|---|---|---:|---:|---:|",
    ]
    for c in LEARNED:
        req = policy.threshold(c, "user")
        ans = policy.answer_thresholds.get(c)
        judged = "only in data" if c in policy.data_only else f"{req.block_at}"
        answer = "-" if ans is None else ("never" if ans.block_at is None else f"{ans.block_at}")
        lines.append(f"| {c} | {CATEGORY_NAMES[c]} | {req.flag_at} | {judged} | {answer} |")
    return "\n".join(lines)


def render_prompts(res: dict[str, object], part: str) -> str:
    kinds: dict[str, dict[str, int]] = res["kinds"]  # type: ignore[assignment]
    lines = [
        f"everyday prompts (data/safety/ood/prompts.jsonl, part={part}) judged as user requests in {res['seconds']}s",
        "",
        "| kind | n | blocked | flagged (let through) |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {m['n']} | {m['blocked']} | {m['flagged']} |" for k, m in kinds.items()),
        f"| **all** | {res['n']} | **{_rate(res['blocked'], res['n'])}** | {_rate(res['flagged'], res['n'])} |",  # type: ignore[arg-type]
    ]
    lines += [f"  {h}" for h in res["hits"]]  # type: ignore[attr-defined]
    return "\n".join(lines)


def render_answers(res: dict[str, object], part: str) -> str:
    kinds: dict[str, dict[str, int]] = res["kinds"]  # type: ignore[assignment]
    lines = [
        f"everyday answers (data/safety/ood/answers.jsonl, part={part}) streamed through the output guard",
        "",
        "| kind | n | stopped | flagged (shown) |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {m['n']} | {m['stopped']} | {m['flagged']} |" for k, m in kinds.items()),
        f"| **all** | {res['n']} | **{_rate(res['stopped'], res['n'])}** | {_rate(res['flagged'], res['n'])} |",  # type: ignore[arg-type]
    ]
    lines += [f"  {h}" for h in res["hits"]]  # type: ignore[attr-defined]
    return "\n".join(lines)
