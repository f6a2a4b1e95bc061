"""The gateway's client-side TTFT: observed once per request, at the first answer text the client is sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from switchyard.libs.bus import NatsServer
from switchyard.schemas import ToolEvent, Work, subjects
from tests.services.gateway.harness import Gateway, Responder, connect
from tests.wait import wait_for

MODEL = "SmolLM2-135M-Instruct"


@dataclass
class GatedResponder(Responder):
    """Plays `gated`: a tool result, then (once the test opens the gate) the answer; `mute`: done, no text."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_work(self, work: Work) -> None:
        if work.text == "gated":
            self.works.append(work)
            tool = ToolEvent(id="t1", name="orders.lookup", arguments={"id": 7}, status="ok", output="shipped")
            await self.emit(work.rid, type="tool", tool=tool.model_dump())
            await self.gate.wait()
            for text in ("Hi", " there"):
                await self.emit(work.rid, type="delta", text=text)
            await self.emit(work.rid, type="done", finish_reason="stop")
        elif work.text == "mute":
            self.works.append(work)
            await self.emit(work.rid, type="done", finish_reason="stop")
        else:
            await super().on_work(work)


@pytest.fixture(scope="module")
async def responder(nats_server: NatsServer) -> AsyncIterator[GatedResponder]:
    bus = await connect(nats_server, "responder")
    r = GatedResponder(bus=bus, healthy=set(subjects.STAGES))
    await r.start()
    yield r
    await bus.drain()


async def ttft_count(c: httpx.AsyncClient, api: str) -> float:
    text = (await c.get("/metrics")).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "switchyard_gateway_ttft_seconds_count" and s.labels.get("api") == api:
                return s.value
    return 0.0


def completion(text: str) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": True}


async def test_ttft_is_the_first_delta_not_the_first_event(gw: Gateway, responder: GatedResponder) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        before = await ttft_count(c, "openai")
        request = c.build_request("POST", "/v1/chat/completions", json=completion("gated"), headers=gw.auth())
        # The status line waits for the first answer event; the tool result is in the gateway before it, and
        # the client has no answer text yet, so nothing is observed.
        opening = asyncio.ensure_future(c.send(request, stream=True))
        seen = len(responder.works)
        await wait_for(lambda: len(responder.works) > seen or None, 10, "the gated work to reach the responder")
        assert await ttft_count(c, "openai") == before
        responder.gate.set()
        r = await opening
        try:
            assert r.status_code == 200
            lines = r.aiter_lines()
            async for line in lines:
                if '"content":"Hi"' in line:
                    break
            assert await ttft_count(c, "openai") == before + 1
            rest = [line async for line in lines]
        finally:
            await r.aclose()
        assert "data: [DONE]" in rest
        # Later deltas do not observe again.
        assert await ttft_count(c, "openai") == before + 1


async def test_answers_without_text_observe_nothing(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        before = await ttft_count(c, "openai")
        refused = await c.post("/v1/chat/completions", json=completion("fail"), headers=gw.auth())
        assert refused.status_code >= 400
        empty = await c.post("/v1/chat/completions", json=completion("mute"), headers=gw.auth())
        assert empty.status_code == 200 and "data: [DONE]" in empty.text
        assert await ttft_count(c, "openai") == before


async def test_each_api_has_its_own_series(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        chat_before, openai_before = await ttft_count(c, "chat"), await ttft_count(c, "openai")
        r = await c.post("/chat", json={"chatId": "m1", "text": "hello"}, headers=gw.auth())
        assert r.status_code == 200 and "event: delta" in r.text
        assert await ttft_count(c, "chat") == chat_before + 1
        assert await ttft_count(c, "openai") == openai_before
        text = (await c.get("/metrics")).text
    # vLLM's TTFT buckets, so the pipeline's figure lines up with each replica's.
    assert 'switchyard_gateway_ttft_seconds_bucket{api="chat",le="0.02"}' in text
    assert 'switchyard_gateway_ttft_seconds_bucket{api="chat",le="2560.0"}' in text
