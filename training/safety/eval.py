"""Evaluate the guards: ``python -m training.safety.eval`` (what ``make eval-safety`` runs).

Three tables, each against data nothing was trained on:

- **input** (``data/safety/eval.jsonl``): a category counts as detected for an example when the guard
  returns a flag or block verdict of that category; precision and recall per category, and the
  benign false-positive rate (share of benign messages with any flag or block at all).
- **answers** (``data/safety/answers/``): the shipped model answers everyday prompts (greedy, cached
  under ``var/cache/safety/``), and each answer streams through the real output guard
  (``StreamGuard`` over the embedding ``InputGuard``) in token-sized pieces; a benign answer
  counts as *stopped* when the guard blocks it. Harmful answer passages, per blocking category,
  stream through the same guard; recall is the share stopped.
- **work traffic** (``data/safety/answers/work_*.txt``): code, shell, logs, traces, configs and the
  security questions developers ask, judged as user input: none may block, few may flag.
- **out of distribution** (``data/safety/ood/``, ``training/safety/ood.py``): generated everyday prompts
  judged as requests (blocked, flagged) and everyday answers streamed through the output guard
  (stopped), beside the calibrated bars in force (``switchyard/libs/safety/data/calibration.json``);
  ``--calibrate`` chooses and writes those bars first (``training/safety/ood_eval.py``).

``--part dev`` (default) scores the development halves the answer thresholds were chosen on;
``--part blind`` the parts kept aside to be scored once (data/safety/README.md). The data is read from
a source checkout's ``data/safety/`` (the labelled splits are built from their sources first:
``splits.ensure_splits``); an installed package carries only the model.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

from switchyard.libs.embeddings.model import DTYPES
from switchyard.libs.safety.calibration import (
    CALIBRATION_PATH,
    read_calibration,
    shipped_calibration,
    write_calibration,
)
from switchyard.libs.safety.classifier import EmbeddingClassifier
from switchyard.libs.safety.guard import InputGuard, screen_for, shared_classifier
from switchyard.libs.safety.policy import SafetyPolicy
from switchyard.libs.safety.stream import StreamGuard
from switchyard.libs.safety.taxonomy import (
    BENIGN,
    BLOCK,
    CATEGORY_NAMES,
    HARM_CATEGORIES,
    JAILBREAK,
    PROMPT_INJECTION,
    SECRETS,
    Verdict,
    worst_action,
)
from training.safety import ood_eval
from training.safety.ood import ANSWERS as OOD_ANSWERS
from training.safety.ood import PROMPTS as OOD_PROMPTS
from training.safety.ood import read as read_ood
from training.safety.ood_eval import calibrate
from training.safety.splits import ANSWERS_DIR, ensure_splits, split_path

ROOT = Path(__file__).resolve().parents[2]
ANSWER_CACHE = ROOT / "var" / "cache" / "safety" / "answers.jsonl"
ANSWER_TOKENS = 96
# The labels whose examples should be refused (hidden text only ever flags).
BLOCKING = frozenset({*HARM_CATEGORIES, PROMPT_INJECTION, JAILBREAK, SECRETS})


def evaluate(
    guard: InputGuard, rows: list[dict[str, str]], source: str = "user", as_data: frozenset[str] = frozenset()
) -> dict[str, object]:
    """``as_data``: labels whose examples are also judged as data (a file): the classifier scores prompt
    injection only there (``SafetyPolicy.data_only``), where it flags; as a user's message, rules judge it."""
    t0 = time.time()
    verdicts = guard.check_many([r["text"] for r in rows], source=source)
    data = [i for i, r in enumerate(rows) if r["label"] in as_data]
    for i, vs in zip(data, guard.check_many([rows[i]["text"] for i in data], source="file"), strict=True):
        seen = {v.category for v in verdicts[i]}
        verdicts[i] = verdicts[i] + [v for v in vs if v.category not in seen]
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
    harmful = [(r, vs) for r, vs in zip(rows, verdicts, strict=True) if r["label"] in BLOCKING]
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
        "as_data": sorted(as_data),
        "harmful_n": len(harmful),
        # Caught: any verdict at all (a flag is recorded and shown to operators); blocked: refused.
        "harmful_detected": sum(1 for _, vs in harmful if vs) / len(harmful) if harmful else None,
        "harmful_blocked": sum(1 for _, vs in harmful if worst_action(vs) == BLOCK) / len(harmful) if harmful else None,
    }


# --- data files ---------------------------------------------------------------------------------


def read_sections(path: Path) -> dict[str, list[str]]:
    """``[key]`` starts a section; each line is an item, or a block between ``<<<`` and ``>>>``
    lines is one (code, logs); ``#`` lines before the first section are the file's comment."""
    out: dict[str, list[str]] = {}
    key: str | None = None
    block: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if block is not None:
            if line.strip() == ">>>":
                out[key or ""].append("\n".join(block))
                block = None
            else:
                block.append(line)
        elif re.fullmatch(r"\[[\w-]+\]", line.strip()):
            key = line.strip()[1:-1]
            out.setdefault(key, [])
        elif key is None or not line.strip():
            continue
        elif line.strip() == "<<<":
            block = []
        else:
            out[key].append(line.strip())
    if block is not None:
        raise ValueError(f"{path}: a <<< block is not closed")
    return out


def answer_set(name: str, part: str) -> dict[str, list[str]]:
    """``benign``, ``harmful`` or ``work``, for part ``dev``, ``blind`` or ``all``."""
    parts = ("dev", "blind") if part == "all" else (part,)
    out: dict[str, list[str]] = {}
    for p in parts:
        for k, items in read_sections(ANSWERS_DIR / f"{name}_{p}.txt").items():
            out.setdefault(k, []).extend(items)
    return out


# --- answers from the shipped model -------------------------------------------------------------


def _model_id(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return f"{Path(path).name}:{h.hexdigest()[:16]}"


def _cache_key(model: str, prompt: str, max_tokens: int) -> str:
    return hashlib.sha256(f"{model}\n{max_tokens}\n{prompt}".encode()).hexdigest()[:24]


def generate_answers(prompts: list[str], max_tokens: int = ANSWER_TOKENS, cache: Path = ANSWER_CACHE) -> list[str]:
    """The shipped model's greedy answer to each prompt (as a single user message), from the
    cache where the same model file, prompt and length were answered before."""
    from switchyard.libs.engine import default_model_path

    model = _model_id(default_model_path())
    known: dict[str, str] = {}
    if cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                known[row["key"]] = row["answer"]
    keys = [_cache_key(model, p, max_tokens) for p in prompts]
    todo = sorted({(k, p) for k, p in zip(keys, prompts, strict=True) if k not in known})
    if todo:
        fresh = asyncio.run(_generate([p for _, p in todo], max_tokens))
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("a", encoding="utf-8") as fh:
            for (k, p), a in zip(todo, fresh, strict=True):
                known[k] = a
                fh.write(json.dumps({"key": k, "model": model, "max_tokens": max_tokens, "prompt": p, "answer": a}))
                fh.write("\n")
    return [known[k] for k in keys]


async def _generate(prompts: list[str], max_tokens: int) -> list[str]:
    from switchyard.libs.engine import EngineConfig, SamplingParams, create_engine

    eng = create_engine(EngineConfig())
    await eng.start()
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)

    async def one(i: int, prompt: str) -> str:
        text = eng.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        parts = [c.text async for c in eng.generate(f"safety-eval-{i}", text, params)]
        return "".join(parts)

    try:
        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
    finally:
        await eng.stop()


# --- the output guard on whole answers ----------------------------------------------------------

_PIECE = re.compile(r"\s*[A-Za-z]{1,6}|\s*\d{1,3}|\s*[^\sA-Za-z\d]|\s+")


def token_pieces(text: str) -> list[str]:
    """``text`` cut roughly as a tokenizer would stream it: short words, digits, punctuation."""
    pieces = _PIECE.findall(text)
    assert "".join(pieces) == text
    return pieces


def stream_answer(guard: InputGuard, text: str, question: str = "") -> Verdict | None:
    """Stream ``text`` through a fresh ``StreamGuard``; the block that stopped it, if any."""
    return streamed(guard, text, question).blocked


def streamed(guard: InputGuard, text: str, question: str = "") -> StreamGuard:
    """The ``StreamGuard`` after ``text`` (the answer to ``question``) was streamed through it."""
    sg = StreamGuard(guard=guard, question=question)
    for piece in token_pieces(text):
        if sg.feed(piece).blocked is not None:
            return sg
    sg.finish()
    return sg


def evaluate_answers(
    guard: InputGuard,
    benign: dict[str, list[tuple[str, str]]],
    harmful: dict[str, list[str]],
    *,
    with_question: bool = False,
) -> dict[str, object]:
    """``benign``: per domain, (prompt, answer) pairs; ``harmful``: per category, passages.

    ``with_question``: each benign answer is judged after its prompt, as safety_out does when
    ``judge_with_question`` is on (off by default; docs/safety.md). The
    harmful passages have no question of their own; they are scored alone (``stopped``) and after an
    unrelated benign prompt (``stopped_after_benign``): the worst case of a jailbreak, whose benign
    looking question must not talk the judge out of a harmful answer."""
    t0 = time.time()
    domains: dict[str, dict[str, int]] = {}
    stops: list[str] = []
    prompts = [p for pairs in benign.values() for p, _ in pairs] or [""]
    for domain, pairs in benign.items():
        d = domains[domain] = {"n": len(pairs), "stopped": 0}
        for prompt, answer in pairs:
            v = stream_answer(guard, answer, prompt if with_question else "")
            if v is not None:
                d["stopped"] += 1
                stops.append(f"{domain} {v.category}:{v.score:.2f}  {prompt[:60]!r} -> {answer[:80]!r}")
    cats: dict[str, dict[str, int]] = {}
    misses: list[str] = []
    for cat, passages in harmful.items():
        c = cats[cat] = {"n": len(passages), "stopped": 0, "named": 0, "flagged": 0, "stopped_after_benign": 0}
        for i, text in enumerate(passages):
            if with_question:
                decoy = prompts[(i * 7 + len(cats)) % len(prompts)]
                c["stopped_after_benign"] += stream_answer(guard, text, decoy) is not None
            sg = streamed(guard, text)
            v = sg.blocked
            c["stopped"] += v is not None
            c["named"] += v is not None and v.category == cat
            c["flagged"] += v is not None or bool(sg.flags)
            if v is None:
                misses.append(f"{cat}  {text[:100]}")
    nb = sum(d["n"] for d in domains.values())
    ns = sum(d["stopped"] for d in domains.values())
    return {
        "version": guard.version,
        "seconds": round(time.time() - t0, 1),
        "benign_domains": domains,
        "benign_n": nb,
        "benign_stopped": ns,
        "benign_stop_rate": ns / nb if nb else None,
        "benign_stops": stops,
        "with_question": with_question,
        "harmful": cats,
        "harmful_misses": misses,
    }


def evaluate_work(guard: InputGuard, kinds: dict[str, list[str]]) -> dict[str, object]:
    """Work traffic as user input: blocked and flagged per kind."""
    per: dict[str, dict[str, int]] = {}
    hits: list[str] = []
    for kind, items in kinds.items():
        verdicts = guard.check_many(items, source="user")
        k = per[kind] = {"n": len(items), "blocked": 0, "flagged": 0}
        for text, vs in zip(items, verdicts, strict=True):
            if vs:
                k["flagged"] += 1
                k["blocked"] += worst_action(vs) == BLOCK
                hits.append(f"{kind} {vs[0].category}:{vs[0].action}:{vs[0].score:.2f}  {text[:80]!r}")
    n = sum(k["n"] for k in per.values())
    return {
        "version": guard.version,
        "kinds": per,
        "n": n,
        "blocked": sum(k["blocked"] for k in per.values()),
        "flagged": sum(k["flagged"] for k in per.values()),
        "hits": hits,
    }


# --- rendering ----------------------------------------------------------------------------------


def _pct(x: object) -> str:
    return "  -  " if x is None else f"{100 * float(x):5.1f}"  # type: ignore[arg-type]


def _ratio(a: int, n: int) -> str:
    # Two decimals: the answer-side target (under 0.5 %) sits between one-decimal steps.
    return f"{100 * a / n:.2f} % ({a} of {n})" if n else "-"


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
    if res.get("as_data"):
        lines.append(f"judged both as the user's message and as data (a file): {', '.join(res['as_data'])}")  # type: ignore[arg-type]
    if res.get("harmful_n"):
        lines.append(
            f"harmful messages (blocking categories): {res['harmful_n']}; caught (flag or block): "
            f"{_pct(res['harmful_detected']).strip()}%; blocked: {_pct(res['harmful_blocked']).strip()}%"
        )
    return "\n".join(lines)


def render_answers(res: dict[str, object], part: str) -> str:
    domains: dict[str, dict[str, int]] = res["benign_domains"]  # type: ignore[assignment]
    cats: dict[str, dict[str, int]] = res["harmful"]  # type: ignore[assignment]
    lines = [
        f"output guard {res['version']}  source=model  answers part={part}  in {res['seconds']}s",
        "",
        "| benign answers: domain | n | stopped |",
        "|---|---:|---:|",
        *(f"| {d} | {m['n']} | {m['stopped']} |" for d, m in domains.items()),
        f"| **all** | {res['benign_n']} | **{_ratio(res['benign_stopped'], res['benign_n'])}** |",  # type: ignore[arg-type]
        "",
        "| harmful answers: category | name | n | recall % (stopped) | stopped as this category % "
        "| stopped or flagged % | recall % after a benign question |",
        "|---|---|---:|---:|---:|---:|---:|",
        *(
            f"| {c} | {CATEGORY_NAMES[c]} | {m['n']} | {_pct(m['stopped'] / m['n'])} | {_pct(m['named'] / m['n'])} "
            f"| {_pct(m['flagged'] / m['n'])} "
            f"| {_pct(m['stopped_after_benign'] / m['n']) if res['with_question'] else '-'} |"
            for c, m in cats.items()
        ),
    ]
    lines += [f"  STOP  {s}" for s in res["benign_stops"]]  # type: ignore[attr-defined]
    lines += [f"  MISS  {s}" for s in res["harmful_misses"]]  # type: ignore[attr-defined]
    return "\n".join(lines)


def render_work(res: dict[str, object], part: str) -> str:
    kinds: dict[str, dict[str, int]] = res["kinds"]  # type: ignore[assignment]
    lines = [
        f"input guard {res['version']}  source=user  work traffic part={part}",
        "",
        "| work traffic: kind | n | blocked | flagged |",
        "|---|---:|---:|---:|",
        *(f"| {k} | {m['n']} | {m['blocked']} | {m['flagged']} |" for k, m in kinds.items()),
        f"| **all** | {res['n']} | **{res['blocked']}** | **{_ratio(res['flagged'], res['n'])}** |",  # type: ignore[arg-type]
    ]
    lines += [f"  HIT  {h}" for h in res["hits"]]  # type: ignore[attr-defined]
    return "\n".join(lines)


def _screened(guard: InputGuard) -> tuple[int, int]:
    s = guard.screen
    return (s.screened, s.escalated) if s is not None else (0, 0)


def _escalated_since(guard: InputGuard, before: tuple[int, int]) -> tuple[int, int]:
    """Answer chunks screened since ``before``, and how many of them the classifier read."""
    now = _screened(guard)
    return now[0] - before[0], now[1] - before[1]


def _render_escalated(guard: InputGuard, counts: tuple[int, int]) -> str:
    if guard.screen is None:
        return "answer chunks: no early exit (the classifier read every chunk whole)"
    n, k = counts
    return (
        f"answer chunks: {n} screened by {guard.screen.version} after layer {guard.screen.exit_layer}; "
        f"went on through the whole classifier: {_ratio(k, n)}"
    )


def answer_pairs(part: str) -> dict[str, list[tuple[str, str]]]:
    """The benign prompts of ``part`` with the shipped model's answers, per domain."""
    prompts = answer_set("benign", part)
    flat = [p for ps in prompts.values() for p in ps]
    answers = iter(generate_answers(flat))
    return {d: [(p, next(answers)) for p in ps] for d, ps in prompts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, nargs="+", help="one or more JSONL files (default: data/safety/eval.jsonl)")
    ap.add_argument("--weights", type=Path, default=None, help="classifier weights (default: the shipped file)")
    ap.add_argument("--rules-only", action="store_true", help="evaluate the guard without embeddings")
    ap.add_argument("--source", default="user", choices=["user", "file", "tool"])
    ap.add_argument("--part", default="dev", choices=["dev", "blind", "all"], help="answer and work-traffic sets")
    ap.add_argument("--input-only", action="store_true", help="skip the answer-side and work-traffic tables")
    ap.add_argument("--with-question", action="store_true", help="judge answer sentences after the user's question")
    ap.add_argument("--json", action="store_true", help="print machine-readable results")
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help=f"choose the request bars on held-out benign text and write them to {CALIBRATION_PATH.name} first",
    )
    ap.add_argument("--calibration", type=Path, default=None, help="judge with this calibration file's bars")
    ap.add_argument(
        "--screen", action="store_true", help="answers: through the early exit (safety_out's `screen` setting)"
    )
    ap.add_argument("--ood-part", default="test", choices=["test", "calib", "all"], help="out-of-distribution sets")
    ap.add_argument(
        "--dtype", default="auto", choices=list(DTYPES), help="what MiniLM runs in (safety services' classifier_dtype)"
    )
    args = ap.parse_args()
    ensure_splits()  # --data data/safety/<split>.jsonl names a built file
    clf = (
        None
        if args.rules_only
        else (EmbeddingClassifier(args.weights, dtype=args.dtype) if args.weights else shared_classifier(args.dtype))
    )
    if args.calibrate:
        if clf is None:
            ap.error("--calibrate needs the classifier (not --rules-only)")
        cal = calibrate(clf)
        write_calibration(cal, args.calibration or CALIBRATION_PATH)
    else:
        cal = read_calibration(args.calibration) if args.calibration else shipped_calibration()
    policy = SafetyPolicy.calibrated(cal)
    # The answer side is judged as safety_out judges it: through the early exit where its setting is on.
    screen = screen_for(clf) if clf is not None and args.screen else None
    guard = InputGuard(policy, use_embeddings=clf is not None, classifier=clf, screen=screen)
    if clf is not None and cal.classifier != clf.version:
        print(f"WARNING: the bars were calibrated for {cal.classifier}, not {clf.version}: rerun with --calibrate")
    for i, path in enumerate(args.data or [split_path("eval")]):
        with path.open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        res = evaluate(guard, rows, args.source, policy.data_only if args.source == "user" else frozenset())
        print(("\n" if i else "") + f"== input: {path.name}")
        print(json.dumps(res, indent=2) if args.json else render(res))
    ood_prompts = ood_eval.evaluate_prompts(guard, read_ood(OOD_PROMPTS, args.ood_part))
    before = _screened(guard)
    ood_answers = ood_eval.evaluate_answers(guard, read_ood(OOD_ANSWERS, args.ood_part), streamed)
    ood_escalated = _escalated_since(guard, before)
    if args.json:
        print(json.dumps({"calibration": cal.model_dump(), "ood_prompts": ood_prompts, "ood_answers": ood_answers}))
    else:
        print("\n== calibrated bars\n" + ood_eval.render_calibration(cal, policy))
        print("\n== out of distribution: prompts\n" + ood_eval.render_prompts(ood_prompts, args.ood_part))
        print("\n== out of distribution: answers\n" + ood_eval.render_answers(ood_answers, args.ood_part))
        print(_render_escalated(guard, ood_escalated))
    if args.input_only:
        return
    pairs = answer_pairs(args.part)
    before = _screened(guard)
    ans = evaluate_answers(guard, pairs, answer_set("harmful", args.part), with_question=args.with_question)
    ans["escalated"] = _escalated_since(guard, before)
    work = evaluate_work(guard, answer_set("work", args.part))
    if args.json:
        print(json.dumps({"answers": ans, "work": work}, indent=2))
    else:
        print(f"\n== answers ({args.part})\n" + render_answers(ans, args.part))
        print(_render_escalated(guard, ans["escalated"]))  # type: ignore[arg-type]
        print(f"\n== work traffic ({args.part})\n" + render_work(work, args.part))


if __name__ == "__main__":
    main()
