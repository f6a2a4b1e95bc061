"""Text completions' encoder: a run's events as `text_completion` chunks (pure: events in, SSE events out),
and the whole `text_completion` body from the same events."""

from __future__ import annotations

import time
from typing import Any

from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, TokenLogprob, Usage
from switchyard.services.gateway.chat_completions.encoder import FINISH
from switchyard.services.gateway.runs.relay import TEXT_SLOT, Encoder, Frame, json_str, json_template, sse


def legacy_logprobs(tokens: list[TokenLogprob] | None, offset: int) -> dict[str, Any] | None:
    """OpenAI's legacy shape: parallel lists of tokens, their log probabilities, each position's top
    alternatives as {token: logprob}, and each token's character offset in the choice's text."""
    if tokens is None:
        return None
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [{a.token: a.logprob for a in t.top_logprobs} for t in tokens],
        "text_offset": offsets,
    }


def usage_json(usages: list[Usage], n: int) -> dict[str, Any]:
    # Each prompt counts once, however many answers it had; every answer's tokens count.
    prompt = sum(u.prompt_tokens for u in usages[::n])
    completion = sum(u.completion_tokens for u in usages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class TextChunkEncoder(Encoder):
    """`text_completion` chunks per answer (the echoed prompt first), the log probabilities whole after an
    answer's text, its finish, then the usage chunk when asked for, and `[DONE]`."""

    def __init__(
        self,
        rid: str,
        model: str,
        prompts: list[str],
        n: int,
        echo: bool,
        include_usage: bool,
        fingerprint: str | None = None,
    ):
        self.base = {
            "id": f"cmpl-{rid}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": fingerprint,
        }
        self.prompts, self.n, self.echo, self.include_usage = prompts, n, echo, include_usage
        self.usages: dict[int, Usage] = {}
        # A text delta's chunk per answer, around its text: built once, not per token.
        self.delta_json: dict[int, tuple[str, str]] = {}

    def chunk(self, index: int, text: str, logprobs: Any = None, finish: str | None = None) -> ServerSentEvent:
        choice = {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}
        return sse({**self.base, "choices": [choice]})

    def opening(self) -> list[ServerSentEvent]:
        if not self.echo:
            return []
        return [self.chunk(i, self.prompts[i // self.n]) for i in range(len(self.prompts) * self.n)]

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        if event.type == "delta":
            template = self.delta_json.get(index)
            if template is None:
                choice = {"text": TEXT_SLOT, "index": index, "logprobs": None, "finish_reason": None}
                template = self.delta_json[index] = json_template({**self.base, "choices": [choice]})
            before, after = template
            return [Frame(before + json_str(event.text) + after)]
        if event.type == "done":
            self.usages[index] = event.usage or Usage()
            out = []
            if event.logprobs is not None:
                out.append(self.chunk(index, "", legacy_logprobs(event.logprobs, 0)))
            return [*out, self.chunk(index, "", finish=FINISH.get(event.finish_reason or "stop", "stop"))]
        if event.type == "error" and event.error is not None:
            return [sse({"error": event.error.model_dump(mode="json")})]
        return []

    def closing(self) -> list[ServerSentEvent]:
        out = []
        if self.include_usage and self.usages:
            usages = [self.usages.get(i, Usage()) for i in range(len(self.prompts) * self.n)]
            out.append(sse({**self.base, "choices": [], "usage": usage_json(usages, self.n)}))
        return [*out, sse("[DONE]")]


def completion_json(
    rid: str,
    model: str,
    prompts: list[str],
    n: int,
    echo: bool,
    answers: list[list[ChatEvent]],
    fingerprint: str | None = None,
) -> dict[str, Any]:
    choices = []
    for i, events in enumerate(answers):
        prompt = prompts[i // n]
        text = "".join(e.text for e in events if e.type == "delta")
        choices.append(
            {
                "text": prompt + text if echo else text,
                "index": i,
                "logprobs": legacy_logprobs(events[-1].logprobs, len(prompt) if echo else 0),
                "finish_reason": FINISH.get(events[-1].finish_reason or "stop", "stop"),
            }
        )
    return {
        "id": f"cmpl-{rid}",
        "object": "text_completion",
        "created": int(time.time()),
        # The model that answered: a configured fallback's name when the router took it.
        "model": answers[0][-1].model or model,
        "system_fingerprint": fingerprint,
        "choices": choices,
        "usage": usage_json([a[-1].usage or Usage() for a in answers], n),
    }
