"""The labelled safety splits: where they live (``DATA_DIR``, outside the package: data is not code),
and how ``<split>.jsonl`` is built from the hand-written ``src/<split>/<label>.txt``
(``tests/safety/test_data.py`` checks that no example leaks between splits).

Which split judged which round, and which are training data now: ``data/safety/README.md``.

Run: ``python -m libs.safety.splits`` (rebuilds every ``<split>.jsonl``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

# The repository's data/safety: the splits are read from a source checkout, never from an installed package.
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "safety"
ANSWERS_DIR = DATA_DIR / "answers"
# The test splits are numbered in the order they were written (data/safety/README.md).
SPLITS = ("train", "eval", "holdout", "test", *(f"test{i}" for i in range(2, 11)))
SRC = DATA_DIR / "src"
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


def split_path(split: str) -> Path:
    """``<split>.jsonl``; a clear error where the data is absent (an installed package has none)."""
    path = DATA_DIR / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the labelled safety splits live in a source checkout's data/safety/")
    return path


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
        with (DATA_DIR / f"{split}.jsonl").open("w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        counts[split] = len(rows)
    return counts


if __name__ == "__main__":
    print(build())
