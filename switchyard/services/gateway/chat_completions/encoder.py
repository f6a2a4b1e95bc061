"""Chat completions' one encoder: a run's events as `chat.completion.chunk`s (pure: events in, SSE events out),
and the `chat.completion` body as the fold of those same chunks."""

from __future__ import annotations

import time
from typing import Any

from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ErrorCode, TokenLogprob, Usage
from switchyard.services.gateway.runs.relay import TEXT_SLOT, Encoder, Frame, json_str, json_template, sse
from switchyard.services.gateway.tool_calls import parse_calls

FINISH = {"stop": "stop", "length": "length", "cancelled": "stop", "blocked": "content_filter", "error": "stop"}


def usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def answers_usage(usages: list[Usage]) -> Usage:
    """The usage of `n` answers to one prompt: the prompt counted once, the answers' tokens summed."""
    return usages[0].model_copy(
        update={
            "completion_tokens": sum(u.completion_tokens for u in usages),
            "reasoning_tokens": sum(u.reasoning_tokens for u in usages),
        }
    )


def blocked(event: ChatEvent) -> bool:
    """Output safety stopped this answer (what it released before stays released)."""
    return event.type == "error" and event.error is not None and event.error.code == ErrorCode.content_blocked


class ChunkEncoder(Encoder):
    """The chunks of one or several (`n`) answers (choice `index` each), then the usage chunk (the prompt
    counted once) and `[DONE]`; a comment keeps the line alive. Of several answers, one that output safety
    stopped ends its own choice with `content_filter`; the others go on."""

    def __init__(
        self,
        rid: str,
        model: str,
        include_usage: bool,
        answers: int,
        tool_names: set[str] | None = None,
        max_calls: int | None = None,
        fingerprint: str | None = None,
    ):
        self.base = {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
        }
        self.include_usage = include_usage
        self.answers = answers
        self.tool_names = tool_names or set()
        self.max_calls = max_calls
        # With client tools an answer may turn out to be a call: its text is held until it is complete.
        self.held: list[list[str]] = [[] for _ in range(answers)]
        # Whether an answer's log probabilities came with its text chunks (then not again at its end).
        self.lp_streamed = [False] * answers
        self.usages: list[Usage] = []
        # A text delta's chunk per answer, around its text: built once, not per token.
        self.delta_json = [json_template(self.chunk({"content": TEXT_SLOT}, index=i)) for i in range(answers)]

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None, index: int = 0
    ) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            **self.base,
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def choice(
        self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None, index: int = 0
    ) -> ServerSentEvent:
        return sse(self.chunk(delta, finish, logprobs, index))

    def opening(self) -> list[ServerSentEvent]:
        return [self.choice({"role": "assistant", "content": ""}, index=i) for i in range(self.answers)]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta":
            if self.tool_names:
                self.held[index].append(event.text)
                return []
            if event.logprobs is not None:  # the text's own tokens: output safety released them unchanged
                self.lp_streamed[index] = True
                return [self.choice({"content": event.text}, None, entries_json(event.logprobs), index=index)]
            before, after = self.delta_json[index]
            return [Frame(before + json_str(event.text) + after)]
        if event.type == "thinking":
            # The field vLLM and DeepSeek use; SDK clients read it from the delta's extra fields.
            return [self.choice({"reasoning_content": event.text}, index=index)]
        if event.type == "done":
            return self._done(index, event)
        if self.answers > 1 and blocked(event):
            return self._filtered(index, event)
        if event.type == "error" and event.error is not None:
            return [sse({"error": event.error.model_dump(mode="json")})]
        return []

    def _filtered(self, index: int, event: ChatEvent) -> list[ServerSentEvent]:
        held = "".join(self.held[index])
        out = [self.choice({"content": held}, index=index)] if held else []
        self.usages.append(event.usage or Usage())
        return [*out, self.choice({}, "content_filter", index=index)]

    def _done(self, index: int, event: ChatEvent) -> list[ServerSentEvent]:
        out = []
        finish = FINISH.get(event.finish_reason or "stop", "stop")
        held = "".join(self.held[index])
        calls = parse_calls(held, self.tool_names, self.max_calls) if self.tool_names else []
        if calls:
            # One chunk per call, each naming its place in the message's `tool_calls`.
            out += [self.choice({"tool_calls": [{"index": i, **call}]}, index=index) for i, call in enumerate(calls)]
            finish = "tool_calls"
        elif held:
            # Held until the answer turned out to be prose: its log probabilities come with it.
            out.append(self.choice({"content": held}, None, logprobs_json(event), index=index))
            self.lp_streamed[index] = True
        if event.logprobs is not None and not self.lp_streamed[index]:
            # Not streamed with the text (a tool call's, or a producer that sends them only at the end):
            # whole, after the text.
            out.append(self.choice({}, None, logprobs_json(event), index=index))
        out.append(self.choice({}, finish, index=index))
        self.usages.append(event.usage or Usage())
        return out

    def closing(self) -> list[ServerSentEvent]:
        out = []
        if self.include_usage and self.usages:
            out.append(sse({**self.base, "choices": [], "usage": usage_json(answers_usage(self.usages))}))
        return [*out, sse("[DONE]")]


def entries_json(entries: list[TokenLogprob]) -> dict[str, Any]:
    return {"content": [t.model_dump() for t in entries], "refusal": None}


def logprobs_json(done: ChatEvent) -> dict[str, Any] | None:
    return None if done.logprobs is None else entries_json(done.logprobs)


def fold_chunks(chunks: list[Any]) -> dict[str, Any]:
    """The `chat.completion` body: the fold of the chunks `ChunkEncoder` streams (with the usage chunk), one
    choice per answer (several with `n`)."""
    body: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict) or "choices" not in chunk:
            continue  # `[DONE]`
        if not body:
            body = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint")}
        if chunk.get("usage") is not None:
            body["usage"] = chunk["usage"]
        for c in chunk["choices"]:
            message = {"role": "assistant", "content": "", "refusal": None}
            choice = choices.setdefault(
                c["index"], {"index": c["index"], "message": message, "logprobs": None, "finish_reason": None}
            )
            delta, message = c["delta"], choice["message"]
            if delta.get("content"):
                message["content"] += delta["content"]
            if delta.get("reasoning_content"):
                message["reasoning_content"] = message.get("reasoning_content", "") + delta["reasoning_content"]
            if delta.get("tool_calls"):  # one chunk per call, in order
                message["content"] = None
                calls = message.setdefault("tool_calls", [])
                calls += [{k: v for k, v in t.items() if k != "index"} for t in delta["tool_calls"]]
            if c.get("logprobs") is not None:  # with their tokens' chunks, or whole after the text
                if choice["logprobs"] is None:
                    choice["logprobs"] = {"content": [], "refusal": None}
                choice["logprobs"]["content"] += c["logprobs"]["content"]
            if c.get("finish_reason") is not None:
                choice["finish_reason"] = c["finish_reason"]
    return {
        "id": body["id"],
        "object": "chat.completion",
        "created": body["created"],
        "model": body["model"],
        "system_fingerprint": body["system_fingerprint"],
        "choices": [choices[i] for i in sorted(choices)],
        "usage": body["usage"],
    }
