"""`docs`: search the shipped policy documents and the user's uploaded files.

Keyword (BM25) and semantic (embedding) rankings are fused with reciprocal rank, so exact terms
("restocking fee") and paraphrases ("send it back") both find their passage.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from switchyard.libs.tools import embed
from switchyard.libs.tools.base import ToolError, ToolOutput
from switchyard.libs.tools.search import (
    BM25,
    Passage,
    chunk_text,
    markdown_passages,
    mentions_file,
    ranked,
    rrf,
    tokenize,
)
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import FileDoc, ToolContext

log = logging.getLogger(__name__)

MIN_SIMILARITY = 0.25  # below this a passage is unrelated to the query, whatever its rank
MAX_FILE_CHARS = 200_000  # of each uploaded file, to keep indexing within the tool's time limit
MAX_EMBEDDED = 96  # passages per file given vectors; the rest are found by keywords only
FILE_CACHE = 64


def load_policies(folder: Path) -> list[Passage]:
    passages: list[Passage] = []
    for path in sorted(folder.glob("*.md")):
        passages.extend(markdown_passages(path.read_text(encoding="utf-8"), f"policies/{path.name}"))
    return passages


class _Indexed:
    """Passages with their tokens and (when the embedder is ready) their vectors."""

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.tokens = [tokenize(p.title + " " + p.text) for p in passages]
        self.vecs: np.ndarray | None = None

    def vectors(self, embedder: Any) -> np.ndarray:
        if self.vecs is None:
            head = embedder.embed([p.text for p in self.passages[:MAX_EMBEDDED]])
            tail = np.zeros((max(0, len(self.passages) - MAX_EMBEDDED), head.shape[1]), dtype=head.dtype)
            self.vecs = np.concatenate([head, tail])
        return self.vecs


class DocsTool:
    name = "docs"
    description = (
        "Search the store's policy documents (returns, damaged items, shipping, warranty, privacy, "
        "cancellations) and the user's uploaded files; returns matching passages with their source."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for"},
            "scope": {"type": "string", "enum": ["all", "policies", "files"], "default": "all"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, settings: ToolSettings) -> None:
        self.settings = settings
        self.policies = _Indexed(load_policies(settings.policies_dir))
        self._files: OrderedDict[str, _Indexed] = OrderedDict()
        self._lock = threading.Lock()

    def warmup(self) -> None:
        if not self.settings.docs_use_embeddings:
            return
        emb = embed.get(block=True)
        if emb is not None:
            with self._lock:
                self.policies.vectors(emb)

    def _file_index(self, f: FileDoc) -> _Indexed:
        text = f.text[:MAX_FILE_CHARS]
        key = f.id + ":" + hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()
        idx = self._files.get(key)
        if idx is None:
            idx = _Indexed(chunk_text(text, f"file:{f.name}"))
            self._files[key] = idx
            while len(self._files) > FILE_CACHE:
                self._files.popitem(last=False)
        self._files.move_to_end(key)
        return idx

    async def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        query = str(arguments.get("query") or "").strip()
        if not query:
            raise ToolError("missing 'query'")
        scope = arguments.get("scope", "all")
        if scope not in ("all", "policies", "files"):
            raise ToolError(f"invalid scope {scope!r}")
        hits = await asyncio.to_thread(self.search, query, scope, ctx.files)
        if not hits:
            return ToolOutput(output=f"No passages matched {query!r}.", data={"passages": []})
        lines = [f"[{i + 1}] ({h['source']}) {h['text']}" for i, h in enumerate(hits)]
        return ToolOutput(
            output="\n".join(lines),
            data={"passages": hits},
            sources=list(dict.fromkeys(h["source"] for h in hits)),
        )

    def search(self, query: str, scope: str, files: list[FileDoc]) -> list[dict[str, Any]]:
        with self._lock:  # shared caches; searches are short
            groups: list[_Indexed] = []
            if scope in ("all", "policies"):
                groups.append(self.policies)
            if scope in ("all", "files"):
                groups.extend(self._file_index(f) for f in files)
            passages = [p for g in groups for p in g.passages]
            if not passages:
                return []
            tokens = [t for g in groups for t in g.tokens]
            bm = BM25(tokens).scores(tokenize(query))
            rankings = [ranked(bm, min_score=0.0)[:20]]
            sims: np.ndarray | None = None
            emb = embed.get(block=False) if self.settings.docs_use_embeddings else None
            if emb is not None:
                qv = emb.embed([query])[0]
                sims = np.concatenate([g.vectors(emb) @ qv for g in groups])
                rankings.append(ranked(sims.tolist(), min_score=MIN_SIMILARITY)[:20])
            fused = rrf(rankings)[: self.settings.docs_top_k]
            chosen = [i for i, _ in fused]
            chosen += self._mentioned_files(query, files, groups, passages, chosen)
            return [
                {
                    "source": passages[i].source,
                    "text": passages[i].text,
                    "bm25": round(bm[i], 3),
                    "similarity": None if sims is None else round(float(sims[i]), 3),
                }
                for i in chosen
            ]

    def _mentioned_files(
        self,
        query: str,
        files: list[FileDoc],
        groups: list[_Indexed],
        passages: list[Passage],
        chosen: list[int],
    ) -> list[int]:
        # "summarize my notes file" matches little by content: hand over the start of a file the
        # user names when none of its passages made the cut.
        extra: list[int] = []
        for f in files:
            if not mentions_file(query, f.name):
                continue
            src_prefix = f"file:{f.name}#"
            if any(passages[i].source.startswith(src_prefix) for i in chosen + extra):
                continue
            for i, p in enumerate(passages):
                if p.source.startswith(src_prefix):
                    extra.append(i)
                    break
        return extra
