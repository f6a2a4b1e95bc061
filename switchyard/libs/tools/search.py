"""Small retrieval toolkit shared by `docs` and the offline `web` index: tokenising, chunking,
Okapi BM25 and reciprocal-rank fusion. Corpora here are hundreds of passages, so plain Python suffices.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in into
    is it its it's me my of on or our so than that the their them then there these they this to was we
    were what what's when where which who why will with would you your yours about also any please
    tell know""".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def _stem(w: str) -> str:
    # Crude suffix stripping: enough for "damaged"~"damage", "returns"~"return",
    # "policies"~"policy", "delivery"~"delivered".
    for suf, rep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("e", "")):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)] + rep
            break
    if w.endswith("y") and len(w) > 4:
        w = w[:-1]
    return w


def tokenize(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@dataclass
class Passage:
    text: str
    source: str  # citation handle shown to the model and the client, e.g. "policies/returns.md#refunds"
    title: str = ""


class BM25:
    def __init__(self, docs: Sequence[list[str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(d) for d in docs]
        self.lens = [len(d) for d in docs]
        self.avgdl = (sum(self.lens) / len(docs)) if docs else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: list[str]) -> list[float]:
        out = []
        for tf, dl in zip(self.tfs, self.lens, strict=True):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * dl / (self.avgdl or 1.0))
            for t in query:
                f = tf.get(t)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out


def ranked(scores: Sequence[float], *, min_score: float) -> list[int]:
    return [i for i in sorted(range(len(scores)), key=lambda i: -scores[i]) if scores[i] > min_score]


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: robust to the different score scales of BM25 and cosine similarity."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + r + 1)
    return sorted(fused.items(), key=lambda x: -x[1])


def mentions_file(text: str, filename: str) -> bool:
    """Whether `text` names the file ("lease.txt" or "lease"), as whole words; tiny stems never match."""
    low = text.lower()
    for name in {filename.lower(), filename.rsplit(".", 1)[0].lower()}:
        if len(name) >= 3 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", low):
            return True
    return False


def markdown_passages(text: str, source: str) -> list[Passage]:
    """One passage per `##` section, prefixed with the document title so each stands alone."""
    title_m = re.search(r"^#\s+(.+)$", text, re.M)
    doc_title = title_m.group(1).strip() if title_m else source
    passages = []
    for sec in re.split(r"^(?=##\s)", text, flags=re.M):
        head = re.match(r"##\s+(.+)", sec)
        if not head:
            continue
        heading = head.group(1).strip()
        body = " ".join(sec[head.end() :].split())
        slug = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-")
        passages.append(Passage(f"{doc_title} - {heading}: {body}", f"{source}#{slug}", heading))
    if not passages:
        passages = chunk_text(text, source)
    return passages


def chunk_text(text: str, source: str, size: int = 700, overlap: int = 100) -> list[Passage]:
    """Paragraph-packed chunks of about `size` characters; long paragraphs are cut with overlap."""
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    pieces: list[str] = []
    for p in paras:
        while len(p) > size:
            cut = p.rfind(" ", overlap, size)
            cut = cut if cut > 0 else size
            pieces.append(p[:cut])
            p = p[max(cut - overlap, 1) :]
        pieces.append(p)
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + len(piece) + 1 <= size:
            chunks[-1] += "\n" + piece
        else:
            chunks.append(piece)
    return [Passage(c, f"{source}#{i + 1}") for i, c in enumerate(chunks)]
