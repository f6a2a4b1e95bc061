"""Grammar-constrained decoding with xgrammar: a constraint becomes a compiled grammar (cached),
each constrained request gets its own matcher, and each step masks its own logits row.

The mask of a row depends only on that request's matcher, which has read only that request's
tokens, so constraints keep batch invariance and replay exactness. Masks are filled on a worker
thread while the forward pass runs (`fill_async`), as vLLM overlaps them."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import xgrammar as xgr

from switchyard.libs.constraints import GrammarLimits
from switchyard.libs.engine.adapter import check_constraint
from switchyard.libs.engine.grammar_worker import CompileWorker, release_free_memory
from switchyard.libs.engine.types import Constraint, ConstraintError
from switchyard.libs.tokenizer import Tokenizer

__all__ = ["ConstraintError", "Grammars", "build_grammar", "check_constraint", "choice_ebnf", "tokenizer_info"]


# The JSON a small model writes: fixed separators, no free whitespace (free whitespace lets a small
# model loop on newlines until max_tokens). `json.dumps`' separators, which the tool format uses too.
def _json(schema: str) -> xgr.Grammar:
    return xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True)


CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def _literal(text: str) -> str:
    # JSON's string escapes are EBNF's.
    return json.dumps(text, ensure_ascii=False)


def choice_ebnf(choices: list[Any]) -> str:
    """A grammar whose only sentences are the given strings."""
    if not choices:
        raise ConstraintError("a choice constraint needs at least one choice")
    return "root ::= " + " | ".join(_literal(str(x)) for x in choices)


def _call_schema(name: str, parameters: dict[str, Any], first: str | None = None) -> str:
    props = parameters.get("properties")
    if first and isinstance(props, dict) and first in props:
        # The forced opening names this argument first: the grammar must list it first too.
        parameters = {**parameters, "properties": {first: props[first], **props}}
    schema = {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": parameters or {"type": "object"}},
        "required": ["name", "arguments"],
    }
    return json.dumps(schema)


def _tools_grammar(spec: dict[str, Any]) -> xgr.Grammar:
    tools = spec.get("tools") or []
    if not tools:
        raise ConstraintError("a tools constraint needs at least one tool")
    first = spec.get("first")
    if spec.get("mode") == "auto":
        tags = [
            xgr.StructuralTagItem(
                begin=f'{CALL_OPEN}{{"name": {json.dumps(t["name"])}, "arguments": ',
                schema=t.get("parameters") or {"type": "object"},
                end="}" + CALL_CLOSE,
            )
            for t in tools
        ]
        return xgr.Grammar.from_structural_tag(tags, [CALL_OPEN])
    calls = [_json(_call_schema(t["name"], t.get("parameters") or {}, first)) for t in tools]
    body = calls[0] if len(calls) == 1 else xgr.Grammar.union(*calls)
    call = xgr.Grammar.concat(
        xgr.Grammar.from_ebnf(f"root ::= {_literal(CALL_OPEN)}"),
        body,
        xgr.Grammar.from_ebnf(f"root ::= {_literal(CALL_CLOSE)}"),
    )
    if not spec.get("parallel"):
        return call
    # Parallel calls: one call, then any number more, each on its own line (the model ends the answer
    # after any complete call). Only the first call's forced opening is in the prompt.
    rest = xgr.Grammar.concat(
        xgr.Grammar.from_ebnf(f"root ::= {_literal(chr(10))}"),  # a newline
        _any_calls(tools),
    )
    return xgr.Grammar.from_structural_tag(
        {
            "type": "structural_tag",
            "format": {
                "type": "sequence",
                "elements": [
                    {"type": "grammar", "grammar": str(call)},
                    {"type": "star", "content": {"type": "grammar", "grammar": str(rest)}},
                ],
            },
        }
    )


def _any_calls(tools: list[dict[str, Any]]) -> xgr.Grammar:
    """One call of any of the tools, no argument forced first (a later call's opening is the model's)."""
    calls = [_json(_call_schema(t["name"], t.get("parameters") or {})) for t in tools]
    return xgr.Grammar.concat(
        xgr.Grammar.from_ebnf(f"root ::= {_literal(CALL_OPEN)}"),
        calls[0] if len(calls) == 1 else xgr.Grammar.union(*calls),
        xgr.Grammar.from_ebnf(f"root ::= {_literal(CALL_CLOSE)}"),
    )


def build_grammar(c: Constraint) -> xgr.Grammar:
    try:
        if c.kind == "json_object":
            return _json(json.dumps({"type": "object"}))
        if c.kind == "json_schema":
            return _json(c.spec)
        if c.kind == "regex":
            return xgr.Grammar.from_regex(c.spec)
        if c.kind == "choice":
            return xgr.Grammar.from_ebnf(choice_ebnf(json.loads(c.spec)))
        if c.kind == "tools":
            return _tools_grammar(json.loads(c.spec))
    except ConstraintError:
        raise
    except Exception as e:  # xgrammar raises RuntimeError/ValueError subclasses for bad input
        raise ConstraintError(f"invalid {c.kind} constraint: {e}") from e
    raise ConstraintError(f"unknown constraint kind {c.kind!r}")


def tokenizer_info(tokenizer: Tokenizer, vocab_size: int) -> xgr.TokenizerInfo:
    """The vocabulary as the GGUF lists it (byte-level BPE, or SentencePiece with U+2581 and <0xXX>
    byte tokens); control tokens are empty, so no grammar ever admits them as text (xgrammar's rule
    for special tokens)."""
    special = tokenizer.special_ids
    vocab = ["" if i in special else (tokenizer.id_to_token(i) or "") for i in range(tokenizer.vocab_size)]
    kind = xgr.VocabType.BYTE_FALLBACK if tokenizer.vocab_type == "spm" else xgr.VocabType.BYTE_LEVEL
    return xgr.TokenizerInfo(
        vocab,
        kind,
        vocab_size=vocab_size,
        stop_token_ids=sorted(tokenizer.eos_token_ids),
        add_prefix_space=tokenizer.add_space_prefix,
    )


class Grammars:
    """Compiles constraints for one tokenizer and vocabulary size (in a worker process, under the limits'
    time budget), keeping the most recently used compiled grammars within the limits' byte budget."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, limits: GrammarLimits | None = None) -> None:
        self.vocab_size = vocab_size
        self.limits = limits or GrammarLimits.model_construct()
        self._worker = CompileWorker(tokenizer_info(tokenizer, vocab_size), self.limits.compile_timeout_s)
        self._compiled: OrderedDict[Constraint, xgr.CompiledGrammar] = OrderedDict()
        self.cached_bytes = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")

    def _compile(self, c: Constraint) -> xgr.CompiledGrammar:
        key = Constraint(c.kind, c.spec)  # the prefix is read per request, not compiled
        with self._lock:
            hit = self._compiled.get(key)
            if hit is not None:
                self._compiled.move_to_end(key)
                return hit
        check_constraint(key, self.limits)
        compiled = self._worker.compile(key, self.limits.env("compile_timeout_s"))
        self._keep(key, compiled)
        return compiled

    def _keep(self, key: Constraint, compiled: xgr.CompiledGrammar) -> None:
        size = compiled.memory_size_bytes
        evicted = False
        with self._lock:
            if key in self._compiled or size > self.limits.cache_bytes:
                return
            self._compiled[key] = compiled
            self.cached_bytes += size
            while self.cached_bytes > self.limits.cache_bytes:
                _, old = self._compiled.popitem(last=False)
                self.cached_bytes -= old.memory_size_bytes
                evicted = True
        if evicted:
            release_free_memory()

    def clear(self) -> None:
        with self._lock:
            self._compiled.clear()
            self.cached_bytes = 0
        release_free_memory()

    def close(self) -> None:
        self._worker.close()
        self._pool.shutdown(wait=False)

    def matcher(self, c: Constraint) -> xgr.GrammarMatcher:
        """A fresh matcher for one request, having read the constraint's prefix (any thread)."""
        m = xgr.GrammarMatcher(self._compile(c))
        if c.prefix and not m.accept_string(c.prefix):
            raise ConstraintError(f"the forced opening {c.prefix!r} does not fit the {c.kind} constraint")
        return m

    def fill_async(self, matchers: list[xgr.GrammarMatcher | None]) -> Future[torch.Tensor]:
        """Allowed-token bitmasks, one row per matcher (rows of None are left all-allowed)."""
        bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)

        def fill() -> torch.Tensor:
            for i, m in enumerate(matchers):
                if m is not None:
                    m.fill_next_token_bitmask(bitmask, i)
            return bitmask

        return self._pool.submit(fill)

    @staticmethod
    def apply(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
        with torch.inference_mode():
            xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows)
