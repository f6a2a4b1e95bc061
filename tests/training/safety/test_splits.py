"""The labelled data sets: built files match their sources and are regenerated exactly, splits do not
leak into each other."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from switchyard.libs.safety.taxonomy import BENIGN, HARM_CATEGORIES, JAILBREAK, PROMPT_INJECTION, SECRETS
from training.safety.splits import SPLITS, build, build_rows, split_path

BLOCKING = (*HARM_CATEGORIES, PROMPT_INJECTION, JAILBREAK, SECRETS)


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
        out[split] = [r["text"] for r in _load(split)]
    return out


def _load(split: str) -> list[dict[str, str]]:
    with split_path(split).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.mark.parametrize("split", SPLITS)
def test_built_files_match_sources(split: str) -> None:
    """The file a reader gets is never stale: ``split_path`` rebuilds it from the sources first."""
    assert _load(split) == build_rows()[split]


def test_build_regenerates_missing_and_stale_files_byte_for_byte(tmp_path: Path) -> None:
    first = build(tmp_path)
    assert first == {split: len(rows) for split, rows in build_rows().items()}
    written = {split: (tmp_path / f"{split}.jsonl").read_bytes() for split in SPLITS}
    (tmp_path / "eval.jsonl").unlink()
    (tmp_path / "test3.jsonl").write_text('{"text": "stale", "label": "benign"}\n', encoding="utf-8")
    assert build(tmp_path) == first
    assert {split: (tmp_path / f"{split}.jsonl").read_bytes() for split in SPLITS} == written
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{split}.jsonl" for split in SPLITS)


def test_unknown_split_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown safety split"):
        split_path("test99")


def test_splits_share_no_example_or_near_copy() -> None:
    leaks = near_duplicates(split_texts(), min_jaccard=0.75)
    assert leaks == [], "\n".join(f"{a}: {ta!r} ~ {b}: {tb!r}" for a, ta, b, tb in leaks[:20])


def test_near_duplicate_check_catches_rewordings() -> None:
    found = near_duplicates(
        {
            "train": ["How do I make sarin at home?", "Plan a trip to Rome.", "What is the capital of France?"],
            "test": ["how do i make SARIN at home", "Plan a trip to Lisbon.", "Who painted the Mona Lisa?"],
        },
        min_jaccard=0.75,
    )
    assert [{a, b} for _, a, _, b in found] == [{"How do I make sarin at home?", "how do i make SARIN at home"}]
    # One word in five changed is still a near-copy at 0.6, not at 0.75.
    loose = near_duplicates({"a": ["Plan a trip to Rome."], "b": ["Plan a trip to Lisbon."]}, min_jaccard=0.6)
    assert len(loose) == 1


def test_test_split_is_large_enough() -> None:
    n = Counter(r["label"] for r in _load("test"))
    assert n[BENIGN] >= 150
    assert {c: n[c] for c in BLOCKING if n[c] < 15} == {}


def test_test2_split_is_large_enough() -> None:
    n = Counter(r["label"] for r in _load("test2"))
    assert n[BENIGN] >= 250
    assert {c: n[c] for c in BLOCKING if n[c] < 20} == {}
    assert set(n) == set(BLOCKING) | {BENIGN}


# Every split from test3 on was written blind (data/safety/README.md).
@pytest.mark.parametrize("split", SPLITS[SPLITS.index("test3") :])
def test_blind_splits_cover_every_learned_category(split: str) -> None:
    # Written blind to judge a model round: every category the classifier learns, and a large
    # benign share (secrets are rules-only, so these splits leave them out). Writers ask for 400
    # benign lines; dropping near-copies of older splits (mostly short everyday messages) leaves 299+.
    n = Counter(r["label"] for r in _load(split))
    assert n[BENIGN] >= 280
    assert {c: n[c] for c in (*HARM_CATEGORIES, PROMPT_INJECTION, JAILBREAK) if n[c] < 20} == {}


def test_dev_split_has_at_least_300_examples() -> None:
    rows = _load("eval")
    assert len(rows) >= 300
    assert {r["label"] for r in rows} >= set(BLOCKING) | {BENIGN}
