"""Anthropic and OpenAI details through the official SDKs, at the bus seam (harness.py plays the pipeline):
an assistant prefill on `/v1/messages` and vLLM's `continue_final_message` / `add_generation_prompt` reach
the pipeline as such; `message_start` carries the prompt's token count inference reported; chat
completions name the engine build in `system_fingerprint`; with `n`, an answer output safety stopped ends
its own choice with `content_filter` and the others are kept."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.services.gateway.harness import FINGERPRINT, USAGE, Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"


def _openai(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)


def _anthropic(gw: Gateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)


def _work(responder: Responder, rid: str):  # type: ignore[no-untyped-def]
    return next(w for w in responder.works if w.rid == rid)


async def test_anthropic_prefill_is_continued_not_repeated(gw: Gateway, responder: Responder) -> None:
    msg = await _anthropic(gw).messages.create(
        model=MODEL,
        max_tokens=32,
        messages=[
            {"role": "user", "content": "greet me"},
            {"role": "assistant", "content": [{"type": "text", "text": "Well,"}]},
        ],
    )
    work = _work(responder, msg.id.removeprefix("msg_"))
    assert (work.text, work.prefill, work.messages) == ("greet me", "Well,", [])
    # Only what the model wrote: the prefill is the client's own.
    assert [b.text for b in msg.content if b.type == "text"] == ["Hello"]


@pytest.mark.parametrize(
    ("final", "thinking", "named"),
    [
        ("Well, ", None, "trailing whitespace"),
        ("Well,", {"type": "enabled", "budget_tokens": 1024}, "thinking"),
    ],
)
async def test_anthropic_prefill_refusals(gw: Gateway, final: str, thinking: object, named: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        await _anthropic(gw).messages.create(
            model=MODEL,
            max_tokens=32,
            messages=[{"role": "user", "content": "greet me"}, {"role": "assistant", "content": final}],
            extra_body={"thinking": thinking} if thinking else None,
        )
    assert named in str(e.value)


async def test_message_start_carries_the_prompt_tokens_inference_reported(gw: Gateway) -> None:
    async with _anthropic(gw).messages.stream(
        model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "greet me"}]
    ) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_message()
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens == USAGE.prompt_tokens  # type: ignore[attr-defined]
    # The final count keeps Anthropic's split: cache reads apart.
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == USAGE.prompt_tokens
    assert "".join(b.text for b in final.content if b.type == "text") == "Hello"


async def test_continue_final_message_and_add_generation_prompt(gw: Gateway, responder: Responder) -> None:
    oa = _openai(gw)
    messages = [{"role": "user", "content": "greet me"}, {"role": "assistant", "content": "Well,"}]
    resp = await oa.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    work = _work(responder, resp.id.removeprefix("chatcmpl-"))
    assert (work.text, work.prefill, work.add_generation_prompt) == ("greet me", "Well,", False)
    assert resp.choices[0].message.content == "Hello"
    # continue_final_message alone: no generation prompt either, as there is nothing to add one after.
    resp = await oa.chat.completions.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_body={"continue_final_message": True},
    )
    assert _work(responder, resp.id.removeprefix("chatcmpl-")).prefill == "Well,"
    bare = await oa.chat.completions.create(
        model=MODEL,
        messages=messages[:1],  # type: ignore[arg-type]
        extra_body={"add_generation_prompt": False},
    )
    work = _work(responder, bare.id.removeprefix("chatcmpl-"))
    assert (work.prefill, work.add_generation_prompt) == (None, False)


@pytest.mark.parametrize(
    ("messages", "extra", "named"),
    [
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Well,"}],
            {"continue_final_message": True, "add_generation_prompt": True},
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ),
        ([{"role": "user", "content": "hi"}], {"continue_final_message": True}, "final message"),
        (
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Well,"}],
            {"continue_final_message": "yes"},
            "continue_final_message",
        ),
    ],
)
async def test_continue_final_message_refusals(
    gw: Gateway, messages: list[dict[str, str]], extra: dict[str, object], named: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        await _openai(gw).chat.completions.create(model=MODEL, messages=messages, extra_body=extra)  # type: ignore[arg-type]
    assert named in str(e.value)


async def test_system_fingerprint_names_the_engine_build(gw: Gateway) -> None:
    oa = _openai(gw)
    user = [{"role": "user", "content": "hi"}]
    resp = await oa.chat.completions.create(model=MODEL, messages=user)  # type: ignore[arg-type]
    assert resp.system_fingerprint == FINGERPRINT
    stream = await oa.chat.completions.create(
        model=MODEL,
        messages=user,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )  # type: ignore[call-overload]
    chunks = [c async for c in stream]
    assert len(chunks) > 3 and {c.system_fingerprint for c in chunks} == {FINGERPRINT}
    # Text completions name it too.
    text = await oa.completions.create(model=MODEL, prompt="Once upon")
    assert text.system_fingerprint == FINGERPRINT
    pieces = [c async for c in await oa.completions.create(model=MODEL, prompt="Once upon", stream=True)]
    assert pieces and {c.system_fingerprint for c in pieces} == {FINGERPRINT}


async def test_one_blocked_answer_of_several_keeps_its_own_finish(gw: Gateway) -> None:
    oa = _openai(gw)
    user = [{"role": "user", "content": "blockone please"}]
    resp = await oa.chat.completions.create(model=MODEL, messages=user, n=2)  # type: ignore[arg-type]
    by_index = {c.index: c for c in resp.choices}
    assert (by_index[0].finish_reason, by_index[0].message.content) == ("stop", "Hello")
    # What output safety released before it stopped the answer stays; the choice says why it ended.
    assert (by_index[1].finish_reason, by_index[1].message.content) == ("content_filter", "Hel")
    stream = await oa.chat.completions.create(model=MODEL, messages=user, n=2, stream=True)  # type: ignore[arg-type,call-overload]
    finish: dict[int, str] = {}
    text: dict[int, str] = {0: "", 1: ""}
    async for chunk in stream:  # type: ignore[union-attr]
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert finish == {0: "stop", 1: "content_filter"} and text == {0: "Hello", 1: "Hel"}


async def test_every_answer_blocked_is_still_the_requests_refusal(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        r = await c.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "midfail"}], "n": 2},
        )
    assert r.status_code == 400 and r.json()["error"]["code"] == "content_blocked"
