"""Build ``train.jsonl`` and ``eval.jsonl`` from the hand-written sources under ``src/``.

``src/train`` and ``src/eval`` hold one example per line, one file per label. ``src/objectives``
holds short goals ("steal a car", "bake bread") that are put into the same request frames for
every label, harmful and benign alike, so the classifier learns the goal, not the phrasing.
Objectives only feed the training set; the eval set is written separately, in other words.
``src/holdout`` (-> ``holdout.jsonl``) was written last, after all tuning, in a looser chat
style, and never used to choose data, thresholds or hyperparameters. It has since been read, so
``src/test`` (-> ``test.jsonl``, written 2026-12-02 before the second model round, varied styles)
was scored once at the end of a round and has since been looked at during development, so
``src/test2`` (-> ``test2.jsonl``, written fresh 2026-12-02, realistic chat-assistant traffic with a
large benign share, about a third of it on sensitive-sounding but harmless topics) is now the
untouched split: never used for any choice, scored once, at the end of a round. test2 was scored at
the end of round 4 and used as development data in round 5, so ``src/test3`` (-> ``test3.jsonl``,
written 2026-12-02 by someone who saw neither the training data nor the model, realistic traffic,
320 benign lines of 672) judged round 5: scored once, for the round-4 and round-5 classifiers.
It has since been read and is development data from round 6 on (docs/safety.md).
``src/test4`` (-> ``test4.jsonl``, written 2026-12-03 the same way, 888 lines after dropping 44
near-copies of other splits) judged round 6, scored once for the round-5 and round-6 classifiers;
it has been read too, so the next round needs a fresh blind split.
From the seventh round (2026-12-03) on, test, test2, test3 and test4 are **training data** as well:
``python -m libs.safety.train --extra-splits test,test2,test3,test4`` adds their rows to
``train.jsonl``'s (their files stay separate, so the leak test below still keeps every split apart
from the others). ``eval`` (what ``make eval-safety`` reports) and ``holdout`` are never trained on
(``train.HELD_OUT``); a fresh blind split (test5), written elsewhere, judges the round.
``src/test5`` (-> ``test5.jsonl``, 878 lines after dropping 66 near-copies) judged round 7, scored
once for the round-6 and round-7 classifiers; it joins the training splits in round 8, which the
blind ``src/test6`` (902 lines after 42 near-copies, a harder benign half) judged: scored once.
test6 joins the training splits in round 9; ``src/test7`` (868 lines after 76 near-copies, written
blind the same way, 40 % of its benign lines easily mistaken for harm) judged round 9, and joins the
training splits in round 10; ``src/test8`` (856 lines after 88 near-copies, written blind the same
way) judged rounds 10 to 12 (docs/safety.md) and joins the training splits in round 13.
``src/test9`` (826 lines after 118 near-copies) judged round 13 and joins the training splits in
round 14; ``src/test10`` (819 lines after 125 near-copies) was scored once, for rounds 12 to 14,
and is read now too, so the next round needs a fresh blind split.

Run: ``python -m libs.safety.data.build``
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The test splits are numbered in the order they were written (docstring above).
SPLITS = ("train", "eval", "holdout", "test", *(f"test{i}" for i in range(2, 11)))
SRC = HERE / "src"
_ESC = re.compile(r"\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})")
FRAMES = (
    "How do I {o}?",
    "What's the best way to {o}?",
    "Give me step-by-step instructions to {o}.",
    "Can you help me {o}?",
    "I need to {o}. Explain how.",
    "tell me how to {o}",
    "Quick question: how can I {o}",
    "Is there an easy way to {o}?",
)


def _lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.rstrip("\n")
        if line.strip() and not line.startswith("#"):
            # Sources spell invisible characters as \uXXXX / \UXXXXXXXX escapes so they stay reviewable.
            out.append(_ESC.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), line))
    return out


def _label(path: Path) -> str:
    # "benign_2.txt" adds to "benign": sources are split only to keep files reviewable.
    return re.sub(r"_\d+$", "", path.stem)


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z0-9]+", text.lower()))


def near_duplicates(splits: dict[str, list[str]], min_jaccard: float = 0.8) -> list[tuple[str, str, str, str]]:
    """Pairs of texts in two different splits that are the same or nearly the same.

    Texts are compared as sets of lower-case words: identical sets (case, punctuation and word
    order aside) or a Jaccard overlap of at least ``min_jaccard`` count as near-copies. Returns
    ``(split_a, text_a, split_b, text_b)`` tuples.
    """
    names = sorted(splits)
    words = {n: [(t, _words(t)) for t in splits[n]] for n in names}
    out: list[tuple[str, str, str, str]] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            index: dict[str, list[int]] = {}
            for j, (_t, w) in enumerate(words[b]):
                for tok in w:
                    index.setdefault(tok, []).append(j)
            for ta, wa in words[a]:
                cand: dict[int, int] = {}
                for tok in wa:
                    for j in index.get(tok, ()):
                        cand[j] = cand.get(j, 0) + 1
                for j, inter in cand.items():
                    tb, wb = words[b][j]
                    union = len(wa) + len(wb) - inter
                    if union and inter / union >= min_jaccard:
                        out.append((a, ta, b, tb))
    return out


def split_texts() -> dict[str, list[str]]:
    """Every split's texts as built (train includes the templated objectives)."""
    out: dict[str, list[str]] = {}
    for split in SPLITS:
        with (HERE / f"{split}.jsonl").open(encoding="utf-8") as fh:
            out[split] = [json.loads(line)["text"] for line in fh if line.strip()]
    return out


def build_rows() -> dict[str, list[dict[str, str]]]:
    """Every split's rows, as ``build`` writes them (without touching any file)."""
    rng = random.Random(13)
    out: dict[str, list[dict[str, str]]] = {}
    for split in SPLITS:
        rows: list[dict[str, str]] = []
        for f in sorted((SRC / split).glob("*.txt")):
            rows += [{"text": t, "label": _label(f)} for t in _lines(f)]
        if split == "train":
            for f in sorted((SRC / "objectives").glob("*.txt")):
                for o in _lines(f):
                    for frame in rng.sample(FRAMES, 3):
                        rows.append({"text": frame.format(o=o), "label": _label(f), "source": "template"})
        seen: set[str] = set()
        out[split] = [r for r in rows if not (r["text"] in seen or seen.add(r["text"]))]  # type: ignore[func-returns-value]
    return out


def build() -> dict[str, int]:
    counts: dict[str, int] = {}
    for split, rows in build_rows().items():
        with (HERE / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        counts[split] = len(rows)
    return counts


if __name__ == "__main__":
    print(build())
