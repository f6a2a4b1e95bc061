"""Decides which tool calls a user message needs, before the model writes anything.

Rules catch the explicit cases (order ids, policy words, code blocks, "search the web");
embedding similarity to a few example intents catches paraphrases the rules miss. The planner
reads only the user's own message: never file contents, history or earlier tool results, so
text planted in a document cannot make it call a tool.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from switchyard.libs.tools import embed
from switchyard.libs.tools.search import mentions_file
from switchyard.libs.tools.settings import ToolSettings
from switchyard.libs.tools.types import ToolCall, ToolContext

ORDER_ID = re.compile(r"\b([A-Za-z]\d{4,6})\b")
ORDER_INTENT = re.compile(
    r"\b(?:my|our|the)\s+(?:last\s+|latest\s+|recent\s+|most\s+recent\s+|current\s+)?"
    r"(?:orders?|package|parcel|shipment|delivery|purchase)\b"
    r"|\border\s+(?:status|number|#)|\btrack(?:ing)?\b.*\b(?:order|package|parcel)\b"
    r"|\bwhere(?:'s|\s+is)\s+my\b|\bwhat did i (?:order|buy)\b",
    re.I,
)
DOCS_INTENT = re.compile(
    r"\b(?:polic(?:y|ies)|returns?|returning|refunds?|exchanges?|warrant(?:y|ies)|guarantee|damaged?|"
    r"broken|defective|faulty|shipping\s+(?:costs?|fees?|times?|options?|rates?)|free shipping|"
    r"privacy|personal data|gdpr|delete my (?:data|account)|restocking|cancel\w*|terms)\b",
    re.I,
)
FILE_INTENT = re.compile(
    r"\b(?:files?|documents?|docs?|pdfs?|attach(?:ed|ment)s?|upload(?:ed|s)?|spreadsheet|contract|notes|"
    r"report)\b",
    re.I,
)
WEB_INTENT = re.compile(
    r"\b(?:search|look\s+up|google|browse|check)\b.{0,40}?\b(?:the\s+)?(?:web|internet|online)\b"
    r"|\b(?:on|from)\s+the\s+(?:web|internet)\b|\blatest news\b|\bweb search\b",
    re.I,
)
WEB_QUERY = re.compile(
    r"(?:search|look\s+up|google|browse|check)\s+(?:the\s+)?(?:web|internet|online)\s+(?:for|about|on)\s+(.+)"
    r"|(?:search|look\s+up|google)\s+(?:for\s+)?(.+?)\s+(?:(?:on|from)\s+the\s+(?:web|internet)|online)"
    r"|web search\s+(?:for\s+)?(.+)",
    re.I,
)
CODE_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
# "a function that returns X" is about code, not the returns policy.
CODE_RETURNS = re.compile(
    r"\b(?:function|method|def|lambda|script|program|code)\b.*?\b(?:that|which|and|to)\s+returns?\b", re.I
)
PYTHON_WORD = re.compile(r"\b(?:python|py|run|execute|eval(?:uate)?)\b", re.I)
CALC_WORD = re.compile(r"\b(?:compute|calculate|evaluate|what(?:'s|\s+is)|how much is|solve)\b", re.I)
ARITH = re.compile(r"[-+(]*\s*\d[\d.,_]*(?:\s*(?:\*\*|[-+*/%^x\u00d7])\s*[(\s]*\d[\d.,_]*\)*)+\)*")
# Splits "X, and what about Y" into clauses, but not "returns and refunds".
CLAUSE_SPLIT = re.compile(
    r"(?:[.?!]+(?=\s|$)|[;\n])+\s*|,?\s+(?:and|also|plus|then)\s+(?=(?:also\s+)?(?:what|what's|how|when|where|why|which|who|"
    r"can|could|would|will|do|does|did|is|are|tell|show|give|search|look|find|run|compute|calculate|"
    r"check|please|i|i'd|is there)\b)|,\s+(?=(?:what|how|when|where|why|which|can|could|do|does|is|are)\b)",
    re.I,
)

# Example phrasings per tool for the embedding fallback (rules handle the explicit wordings).
INTENTS: dict[str, list[str]] = {
    "orders": [
        "where is my order",
        "when will my package arrive",
        "has my purchase shipped yet",
        "what is the delivery status of the thing I bought",
        "track my parcel",
        "what did I buy last week",
        "has my stuff been sent",
        "is it on its way to me",
    ],
    "docs": [
        "what is your return policy",
        "can I get my money back",
        "the item arrived broken, what are my options",
        "can I send back something that doesn't fit",
        "the product came cracked",
        "how long does shipping take",
        "is there a warranty on this product",
        "how do you handle my personal information",
        "what does my uploaded document say",
    ],
    "web": [
        "what is the latest news about",
        "find information on the internet about",
        "look this up online",
    ],
}


def _new_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]


def split_clauses(text: str) -> list[str]:
    return [c.strip(" ,") for c in CLAUSE_SPLIT.split(text) if c and c.strip(" ,")]


WORD_OPS = [
    (r"multiplied by|times", "*"),
    (r"divided by|over", "/"),
    (r"plus", "+"),
    (r"minus", "-"),
    (r"to the power of|raised to", "**"),
    (r"mod(?:ulo)?", "%"),
]


def arithmetic_code(clause: str) -> str | None:
    """`compute 17*23` -> `print(17*23)`; None when the clause holds no arithmetic."""
    for words, op in WORD_OPS:
        clause = re.sub(rf"(?<=[\d)])\s+(?:{words})\s+(?=[\d(])", f" {op} ", clause, flags=re.I)
    m = ARITH.search(clause)
    if not m:
        return None
    expr = m.group(0).strip()
    expr = expr.replace("\u00d7", "*").replace("^", "**").replace(",", "")
    expr = re.sub(r"(?<=\d)\s*x\s*(?=\d)", "*", expr)
    if not re.fullmatch(r"[\d\s.+\-*/%()_]+", expr):
        return None
    try:
        # Dates and phone numbers look like subtraction; only well-formed expressions count.
        compile(expr, "<expr>", "eval")
    except SyntaxError:
        return None
    return f"print({expr})"


def with_visible_result(code: str) -> str:
    """Notebook semantics: a snippet ending in a bare expression prints it, as users expect."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # let the sandbox report the error
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    value = last.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        return code
    lines = code.splitlines()
    end_line = lines[(last.end_lineno or last.lineno) - 1]
    if last.col_offset != 0 or end_line[last.end_col_offset or 0 :].strip():
        return code  # shares a line with other statements; leave it alone
    segment = ast.get_source_segment(code, last)
    if segment is None:
        return code
    return "\n".join([*lines[: last.lineno - 1], f"print({segment})"])


EmbedMany = Callable[[list[str]], Awaitable[list[np.ndarray]]]


@dataclass
class PlanDraft:
    """A plan in the making: the calls so far (no duplicates, at most ``max_calls``), the order ids
    seen, and the clauses no rule matched."""

    max_calls: int
    calls: list[ToolCall] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def add(self, name: str, arguments: dict[str, Any]) -> None:
        key = (name, repr(sorted(arguments.items())))
        if key not in self._seen and len(self.calls) < self.max_calls:
            self._seen.add(key)
            self.calls.append(ToolCall(id=_new_id(), name=name, arguments=arguments))


class ToolPlanner:
    def __init__(self, settings: ToolSettings, *, use_embeddings: bool = True) -> None:
        self.settings = settings
        self.use_embeddings = use_embeddings
        # Small talk scores < 0.35 against every intent; paraphrases of an intent > 0.6.
        self.threshold = settings.planner_similarity
        self._embedder: Any = None
        self._intent_vecs: dict[str, np.ndarray] | None = None

    # -- embeddings -------------------------------------------------------------------------------
    def warmup(self) -> bool:
        """Load the embedding model now rather than on the first message; False if unavailable."""
        return self._load_embeddings()

    def _load_embeddings(self) -> bool:
        if not self.use_embeddings:
            return False
        if self._intent_vecs is None:
            # Blocks on first use: plan() is synchronous and the service warms it up at startup.
            self._embedder = embed.get(block=True)
            if self._embedder is None:
                # Planning must work without the model (minimal installs): rules only.
                self.use_embeddings = False
                return False
            self._intent_vecs = {k: self._embedder.embed(v) for k, v in INTENTS.items()}
        return True

    def embed_clauses(self, clauses: list[str]) -> list[np.ndarray]:
        """One unit vector per clause (the pass a ``PassBatcher`` shares across requests)."""
        if not clauses or not self._load_embeddings():
            return []
        return list(self._embedder.embed(clauses))

    def _similar_intents(self, vecs: list[np.ndarray]) -> list[tuple[int, str]]:
        """(clause index, tool) for clause vectors close to a tool's example intents."""
        if not vecs or self._intent_vecs is None:
            return []
        hits = []
        for i, v in enumerate(vecs):
            scores = {k: float(np.max(iv @ v)) for k, iv in self._intent_vecs.items()}
            best = max(scores, key=lambda k: scores[k])
            if scores[best] >= self.threshold:
                hits.append((i, best))
        return hits

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, text: str, ctx: ToolContext) -> list[ToolCall]:
        """The tool calls ``text`` needs (rules, then embeddings for the clauses no rule matched)."""
        draft = self.draft(text, ctx)
        return self.finish(draft, self.embed_clauses(draft.unmatched))

    async def plan_batched(self, text: str, ctx: ToolContext, embed_many: EmbedMany) -> list[ToolCall]:
        """``plan`` whose embedding pass is shared with every other request waiting (``embed_many``)."""
        draft = self.draft(text, ctx)
        if not draft.unmatched or not self.use_embeddings:
            return self.finish(draft, [])
        return self.finish(draft, await embed_many(draft.unmatched))

    def draft(self, text: str, ctx: ToolContext) -> PlanDraft:
        """What the rules plan (cheap: regular expressions), and the clauses left for the embeddings."""
        d = PlanDraft(max_calls=self.settings.max_calls)

        # Code first, and cut it out so words inside code ("order", "policy") plan nothing else.
        fences = list(CODE_FENCE.finditer(text))
        prose = CODE_FENCE.sub(" ", text)
        for m in fences:
            lang, body = m.group(1).lower(), m.group(2)
            # An unlabelled block runs only when the prose asks for it (it might be a log or data).
            if lang in ("python", "py", "python3") or (not lang and PYTHON_WORD.search(prose)):
                d.add("code", {"code": with_visible_result(body.strip("\n"))})
        if PYTHON_WORD.search(prose):
            for m in INLINE_CODE.finditer(prose):
                d.add("code", {"code": with_visible_result(m.group(1).strip())})
                prose = prose.replace(m.group(0), " ")

        d.ids = sorted({m.upper() for m in ORDER_ID.findall(prose)}, key=prose.upper().find)
        for oid in d.ids:
            d.add("orders", {"order_id": oid})

        for clause in split_clauses(prose):
            hit = False
            if ORDER_INTENT.search(clause):
                hit = True
                if not d.ids:
                    d.add("orders", {})
            if DOCS_INTENT.search(CODE_RETURNS.sub(" ", clause)) or (ctx.files and self._mentions_files(clause, ctx)):
                hit = True
                d.add("docs", {"query": clause})
            if WEB_INTENT.search(clause):
                hit = True
                d.add("web", {"query": self._web_query(clause)})
            if CALC_WORD.search(clause) or PYTHON_WORD.search(clause):
                code = arithmetic_code(clause)
                if code:
                    hit = True
                    d.add("code", {"code": code})
            if not hit and len(clause.split()) >= 3:
                d.unmatched.append(clause)
        return d

    def finish(self, draft: PlanDraft, vecs: list[np.ndarray]) -> list[ToolCall]:
        """The draft's calls plus those the unmatched clauses' vectors (in order) call for."""
        for i, tool in self._similar_intents(vecs):
            clause = draft.unmatched[i]
            if tool == "orders":
                if not draft.ids:
                    draft.add("orders", {})
            else:
                draft.add(tool, {"query": clause})
        return draft.calls

    @staticmethod
    def _mentions_files(clause: str, ctx: ToolContext) -> bool:
        if FILE_INTENT.search(clause):
            return True
        return any(mentions_file(clause, f.name) for f in ctx.files)

    @staticmethod
    def _web_query(clause: str) -> str:
        m = WEB_QUERY.search(clause)
        if m:
            q = next(g for g in m.groups() if g)
            return q.strip(" ?.!\"'")
        return clause.strip(" ?.!")
