"""`web`: web search behind a provider interface.

The default provider is offline (a JSONL index shipped under infra/web_index/) so the demo and
tests never need the internet; deployments point the HTTP provider at a self-hosted SearxNG-style
endpoint (`GET <url>?q=...&format=json` -> `{"results": [{"url", "title", "content"}]}`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from switchyard.libs.tools.base import ToolError, ToolOutput
from switchyard.libs.tools.search import BM25, ranked, tokenize
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolContext

SNIPPET_CHARS = 300


@dataclass
class WebHit:
    url: str
    title: str
    snippet: str


class SearchProvider(Protocol):
    async def search(self, query: str, k: int) -> list[WebHit]: ...


def best_snippet(text: str, query_tokens: list[str], size: int = SNIPPET_CHARS) -> str:
    """The sentence window with the most query terms, so the model sees the relevant part of a page."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    wanted = set(query_tokens)
    best, best_score = 0, -1
    for i, s in enumerate(sentences):
        score = len(wanted & set(tokenize(s)))
        if score > best_score:
            best, best_score = i, score
    out = ""
    for s in sentences[best:]:
        if out and len(out) + len(s) + 1 > size:
            break
        out = (out + " " + s).strip()
    return out[:size]


class LocalIndexProvider:
    """BM25 over a JSONL file of pages: {"url", "title", "text"} per line."""

    def __init__(self, path: Path) -> None:
        self.pages: list[dict[str, str]] = []
        if path.exists():
            with path.open(encoding="utf-8") as f:
                self.pages = [json.loads(line) for line in f if line.strip()]
        self.bm25 = BM25([tokenize(p["title"] + " " + p["title"] + " " + p["text"]) for p in self.pages])

    async def search(self, query: str, k: int) -> list[WebHit]:
        q = tokenize(query)
        if not self.pages or not q:
            return []
        order = ranked(self.bm25.scores(q), min_score=0.0)[:k]
        return [
            WebHit(self.pages[i]["url"], self.pages[i]["title"], best_snippet(self.pages[i]["text"], q)) for i in order
        ]


class HttpSearchProvider:
    """A self-hosted SearxNG-compatible JSON search API."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s

    async def search(self, query: str, k: int) -> list[WebHit]:
        async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client:
            resp = await client.get(self.url, params={"q": query, "format": "json"})
        if resp.status_code != 200:
            raise ToolError(f"search service answered HTTP {resp.status_code}")
        try:
            results = resp.json().get("results", [])
        except (ValueError, AttributeError) as e:
            raise ToolError("search service returned invalid JSON") from e
        hits = []
        for r in results:
            if not isinstance(r, dict) or not r.get("url"):
                continue
            content = " ".join(str(r.get("content") or "").split())
            hits.append(WebHit(str(r["url"]), str(r.get("title") or r["url"]), content[:SNIPPET_CHARS]))
            if len(hits) >= k:
                break
        return hits


def make_provider(settings: ToolSettings) -> SearchProvider:
    if settings.web_provider == "http":
        if not settings.web_url:
            raise ValueError("web_provider 'http' needs web_url")
        return HttpSearchProvider(settings.web_url, settings.web_timeout_s)
    return LocalIndexProvider(settings.web_index)


class WebTool:
    name = "web"
    description = "Search the web and return the top results (title, URL, snippet)."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search terms"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, settings: ToolSettings, provider: SearchProvider | None = None) -> None:
        self.settings = settings
        self.provider = provider or make_provider(settings)

    async def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        query = str(arguments.get("query") or "").strip()
        if not query:
            raise ToolError("missing 'query'")
        try:
            hits = await self.provider.search(query[:500], self.settings.web_top_k)
        except httpx.HTTPError as e:
            raise ToolError(f"search service unreachable: {type(e).__name__}") from e
        if not hits:
            return ToolOutput(output=f"No web results for {query!r}.", data={"results": []})
        lines = [f"[{i + 1}] {h.title} - {h.url}\n{h.snippet}" for i, h in enumerate(hits)]
        return ToolOutput(
            output="\n".join(lines),
            data={"results": [asdict(h) for h in hits]},
            sources=[h.url for h in hits],
        )
