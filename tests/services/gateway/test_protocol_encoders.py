"""The protocols' encoders, pure (events in, frames out): the JSON bodies they fold to are exactly what the
routes' response models document, the engine's report (prompt tokens, build) reaches the first frame, and
of several chat answers one that output safety stopped ends its own choice."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from switchyard.schemas import ChatEvent, ErrorCode, ErrorInfo, TokenLogprob, ToolEvent, TopLogprob, Usage
from switchyard.services.gateway.chat_completions.encoder import ChunkEncoder, fold_chunks
from switchyard.services.gateway.chat_completions.response import ChatCompletion
from switchyard.services.gateway.completions.encoder import completion_json
from switchyard.services.gateway.completions.response import Completion
from switchyard.services.gateway.messages.encoder import MessageEncoder, fold_message
from switchyard.services.gateway.messages.response import Message
from switchyard.services.gateway.runs.relay import frames_of

USAGE = Usage(prompt_tokens=40, cached_tokens=16, completion_tokens=5, reasoning_tokens=2)
LP = [TokenLogprob(token="Hi", logprob=-0.1, bytes=[72, 105], top_logprobs=[TopLogprob(token="Hi", logprob=-0.1)])]


def answer(text: str = "Hello", **done: Any) -> list[ChatEvent]:
    return [
        ChatEvent(rid="r", type="tool", tool=ToolEvent(id="t", name="orders.lookup", status="ok")),
        ChatEvent(rid="r", type="thinking", text="hmm"),
        ChatEvent(rid="r", type="delta", text=text[:2]),
        ChatEvent(rid="r", type="delta", text=text[2:]),
        ChatEvent(rid="r", type="done", finish_reason="stop", usage=USAGE, **done),
    ]


def blocked() -> list[ChatEvent]:
    info = ErrorInfo.of(ErrorCode.content_blocked, "answer stopped by output safety (violence)")
    return [ChatEvent(rid="r", type="delta", text="Hel"), ChatEvent(rid="r", type="error", error=info, usage=USAGE)]


def documented(model: type[BaseModel], body: dict[str, Any]) -> None:
    """The body is an instance of the route's response model, every key of it and nothing else."""
    assert model.model_validate(body).model_dump(mode="json", exclude_unset=True) == body


def test_chat_completion_body_is_the_documented_object_with_the_build() -> None:
    enc = ChunkEncoder("r", "m", True, 2, fingerprint="native-0.1.0-abc")
    frames = frames_of(enc, [answer(logprobs=LP), answer("Howdy")])
    assert {f["system_fingerprint"] for f in frames if isinstance(f, dict)} == {"native-0.1.0-abc"}
    body = fold_chunks(frames)
    documented(ChatCompletion, body)
    assert [c["message"]["content"] for c in body["choices"]] == ["Hello", "Howdy"]
    assert body["system_fingerprint"] == "native-0.1.0-abc" and body["usage"]["completion_tokens"] == 10


def test_of_several_answers_a_blocked_one_ends_its_own_choice() -> None:
    body = fold_chunks(frames_of(ChunkEncoder("r", "m", True, 2), [answer(), blocked()]))
    documented(ChatCompletion, body)
    assert [(c["finish_reason"], c["message"]["content"]) for c in body["choices"]] == [
        ("stop", "Hello"),
        ("content_filter", "Hel"),
    ]
    # Both answers' tokens are counted; the prompt once.
    assert body["usage"]["completion_tokens"] == 10 and body["usage"]["prompt_tokens"] == 40
    # One answer alone: the block is the stream's error, as before.
    alone = frames_of(ChunkEncoder("r", "m", False, 1), [blocked()])
    assert {
        "error": ErrorInfo.of(ErrorCode.content_blocked, "answer stopped by output safety (violence)").model_dump()
    } in alone


def test_message_start_carries_the_prompt_tokens_and_the_body_is_documented() -> None:
    frames = frames_of(MessageEncoder("r", "m", input_tokens=40), [answer()])
    start = frames[0]
    assert start["type"] == "message_start" and start["message"]["usage"]["input_tokens"] == 40
    body = fold_message(frames)
    documented(Message, body)
    assert [b["type"] for b in body["content"]] == ["thinking", "text"] and body["content"][1]["text"] == "Hello"
    # The final usage: cache reads apart from input tokens, as Anthropic counts them.
    assert (body["usage"]["input_tokens"], body["usage"]["cache_read_input_tokens"]) == (24, 16)
    unknown = frames_of(MessageEncoder("r", "m"), [answer()])
    assert unknown[0]["message"]["usage"]["input_tokens"] == 0  # nothing reported: nothing claimed


def test_text_completion_body_is_the_documented_object() -> None:
    body = completion_json("r", "m", ["Once"], 2, True, [answer(logprobs=LP), answer("Upon")], "native-0.1.0-abc")
    documented(Completion, body)
    assert body["system_fingerprint"] == "native-0.1.0-abc"
    assert [c["text"] for c in body["choices"]] == ["OnceHello", "OnceUpon"]
