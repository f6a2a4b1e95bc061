"""The official OpenAI and Anthropic SDKs against a gateway served by uvicorn."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.services.gateway.harness import Gateway, Responder
from tests.services.gateway.sse_client import parse
from tests.wait import wait_for

MODEL = "SmolLM2-135M-Instruct"


def _openai(gw: Gateway, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=key or gw.pro_key, max_retries=0)


def _anthropic(gw: Gateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)


async def test_openai_streaming_with_usage(gw: Gateway, responder: Responder) -> None:
    client = _openai(gw)
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        ],
        stream=True,
        stream_options={"include_usage": True},
        temperature=0.2,
        max_tokens=20,
        stop=["\n\n"],
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens == 42 and usage_chunk.usage.completion_tokens == 3
    assert usage_chunk.usage.prompt_tokens_details is not None
    assert usage_chunk.usage.prompt_tokens_details.cached_tokens == 16
    rid = chunks[0].id.removeprefix("chatcmpl-")
    work = next(w for w in responder.works if w.rid == rid)
    assert work.api == "openai" and work.system == "be brief" and work.text == "hello"
    assert [(m.role, m.content) for m in work.messages] == [("user", "earlier"), ("assistant", "ok")]
    assert work.sampling.max_tokens == 20 and work.sampling.stop == ["\n\n"] and work.sampling.seed is not None


async def test_openai_raw_stream_ends_with_done(gw: Gateway) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": True}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/chat/completions", json=body, headers=gw.auth())
    events = parse(r.text)
    assert events[-1].data == "[DONE]"
    assert all(e.data["object"] == "chat.completion.chunk" for e in events[:-1])
    assert "usage" not in events[1].data  # only with include_usage


async def test_openai_non_streaming(gw: Gateway) -> None:
    client = _openai(gw)
    resp = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}], seed=3)
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content == "Hello" and resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.total_tokens == 45
    assert resp.usage.prompt_tokens_details is not None and resp.usage.prompt_tokens_details.cached_tokens == 16


async def test_openai_sdk_errors(gw: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError):
        await _openai(gw, "sy-not-a-key").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello"}]
        )
    with pytest.raises(openai.NotFoundError):
        await _openai(gw).chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(openai.BadRequestError):
        await _openai(gw).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ""}])
    # Refused by the pipeline before any token: the real status, so the SDK raises its own type.
    with pytest.raises(openai.BadRequestError) as e:
        await _openai(gw).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "fail"}])
    assert "blocked by policy" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        await _openai(gw).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "fail"}], stream=True
        )
    # After the stream started, the error arrives in-band and the SDK raises while iterating.
    stream2 = await _openai(gw).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "midfail"}], stream=True
    )
    got = []
    with pytest.raises(openai.APIError) as e2:
        async for chunk in stream2:
            got.append(chunk)
    assert "stopped by output check" in str(e2.value)
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hel"


async def test_anthropic_streaming_event_sequence(gw: Gateway, responder: Responder) -> None:
    client = _anthropic(gw)
    kinds = []
    async with client.messages.stream(
        model=MODEL, max_tokens=64, system="be brief", messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_message()
    raw = [k for k in kinds if k not in ("text", "thinking", "signature", "input_json")]
    assert raw == [
        "message_start",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].text == "Hello"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3
    assert final.usage.cache_read_input_tokens == 16 and final.usage.input_tokens == 26
    work = next(w for w in responder.works if w.rid == final.id.removeprefix("msg_"))
    assert work.api == "anthropic" and work.system == "be brief" and work.sampling.max_tokens == 64


async def test_anthropic_raw_sequence_and_ping(gw: Gateway) -> None:
    body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}], "stream": True}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/v1/messages", json=body, headers={"x-api-key": gw.pro_key})
    events = parse(r.text)
    assert [e.event for e in events][:2] == ["message_start", "ping"]
    assert all(e.event == e.data["type"] for e in events)
    delta = next(e for e in events if e.event == "message_delta")
    assert delta.data["usage"]["cache_read_input_tokens"] == 16


async def test_anthropic_non_streaming_and_errors(gw: Gateway) -> None:
    client = _anthropic(gw)
    msg = await client.messages.create(model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "hello"}])
    assert msg.content[-1].text == "Hello"  # type: ignore[union-attr]
    assert msg.usage.output_tokens == 3
    bad = anthropic.AsyncAnthropic(base_url=gw.url, api_key="sy-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        await bad.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(anthropic.BadRequestError):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "fail"}])
    with pytest.raises(anthropic.APIStatusError):
        async with client.messages.stream(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "midfail"}]
        ) as stream:
            async for _ in stream:
                pass


async def test_non_streaming_client_that_leaves_cancels(gw: Gateway, responder: Responder) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0, timeout=1.5)
    seen = len(responder.works)
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hang"}])
    rid = next(w.rid for w in responder.works[seen:] if w.text == "hang")
    await wait_for(lambda: any(n.rid == rid for n in responder.cancels), what=f"the cancel of {rid}")
    assert [n.reason for n in responder.cancels if n.rid == rid] == ["client_disconnected"]
