"""Choose the classifier's request bars from held-out benign text (``python -m training.safety.eval --calibrate``).

Per category, the block bar must clear the highest score any benign calibration text got in that
category by ``margin``; a budget of ``target_fpr`` of the calibration texts may stay above their bars,
spent on the highest-scoring texts first (the outliers no bar below 1 can clear). A bar never falls
below ``floor`` nor rises above ``cap``: the classifier must put at least 60 % on harm to block on its
own (the single bar before calibration was 0.5, a coin's toss), and a category whose benign texts score
past the cap still blocks at the cap, those texts counted, not hidden.
The flag bar stays where it was: a score between the two bars is borderline, flagged and let through.

Only the categories the classifier judges on a user's own request are calibrated; the bars of
categories judged only in data (``SafetyPolicy.data_only``) stay as they are: data never blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from switchyard.libs.safety.calibration import Bar

FLOOR = 0.6
CAP = 0.995
MARGIN = 0.02
TARGET_FPR = 0.001


def request_bars(
    benign: Sequence[Mapping[str, float]],
    base: Mapping[str, Bar],
    categories: Iterable[str],
    *,
    target_fpr: float = TARGET_FPR,
    margin: float = MARGIN,
    floor: float = FLOOR,
    cap: float = CAP,
) -> dict[str, Bar]:
    """New bars for ``categories`` from the classifier's scores of benign texts (one mapping per text,
    category to score, as ``EmbeddingClassifier.score_many`` gives them); other categories keep ``base``."""
    cats = list(categories)
    budget = int(target_fpr * len(benign))
    # Each text's worst score over the calibrated categories: the texts a budget would let through
    # are the ones no reasonable bar clears.
    worst = sorted(range(len(benign)), key=lambda i: -max((benign[i].get(c, 0.0) for c in cats), default=0.0))
    spared = set(worst[:budget])
    out = dict(base)
    for c in cats:
        top = max((s.get(c, 0.0) for i, s in enumerate(benign) if i not in spared), default=0.0)
        block = round(min(cap, max(floor, top + margin)), 4)
        flag = min(base[c].flag_at, block)
        out[c] = Bar(flag_at=flag, block_at=block)
    return out


def blocked_by(scores: Mapping[str, float], bars: Mapping[str, Bar], categories: Iterable[str]) -> list[str]:
    """The categories whose block bar ``scores`` reach (what the guard would block the text for)."""
    out = []
    for c in categories:
        b = bars[c].block_at
        if b is not None and scores.get(c, 0.0) >= b:
            out.append(c)
    return out
