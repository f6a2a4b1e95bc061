"""Embeddings and token counting at the gateway, with the serving stages scripted at the bus seam: what the
gateway asks (the chat request's own split of the messages, the key's tenant and user), the key's rate limits,
and bad input refused before anything is asked. The real encoder and renderer are in
tests/e2e/test_embeddings_tokens.py."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx
import numpy as np
import openai
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.schemas import EmbedReply, EmbedRequest, TokenizeQuery, TokenizeReply, subjects
from tests.services.gateway.harness import Gateway, Responder, gateway, tiny_tiers

MODEL = "SmolLM2-135M-Instruct"
EMBEDDING = "all-MiniLM-L6-v2"


async def post(c: httpx.AsyncClient, path: str, body: dict[str, object]) -> httpx.Response:
    # json.dumps escapes a lone surrogate (as a client's JSON may carry one); httpx would refuse to encode it.
    return await c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


class Stages:
    """Scripted context (`context.tokenize`) and tools (`tools.embeddings`) answers, keeping what they were asked."""

    def __init__(self) -> None:
        self.tokenize: list[TokenizeQuery] = []
        self.embed: list[EmbedRequest] = []

    async def on_tokenize(self, q: TokenizeQuery) -> TokenizeReply:
        self.tokenize.append(q)
        return TokenizeReply(count=77, max_model_len=2048, tokens=list(range(77)) if q.ids else [])

    async def on_embed(self, q: EmbedRequest) -> EmbedReply:
        self.embed.append(q)
        rows = np.arange(len(q.texts) * 384, dtype="<f4").reshape(len(q.texts), 384)
        return EmbedReply(
            model=EMBEDDING, dim=384, vectors=base64.b64encode(rows.tobytes()).decode(), tokens=[30] * len(q.texts)
        )


@pytest.fixture(scope="module")
async def stages(responder: Responder) -> AsyncIterator[Stages]:
    s = Stages()
    subs = [
        await responder.bus.subscribe(subjects.TOKENIZE, TokenizeQuery, s.on_tokenize),
        await responder.bus.subscribe(subjects.EMBEDDINGS, EmbedRequest, s.on_embed),
    ]
    await responder.bus.flush()
    yield s
    for sub in subs:
        await responder.bus.unsubscribe(sub)


async def test_count_tokens_asks_for_the_chat_requests_prompt(gw: Gateway, stages: Stages) -> None:
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)
    counted = await client.messages.count_tokens(
        model=MODEL,
        system=[{"type": "text", "text": "be brief"}],
        messages=[
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "now"}]},
        ],
        tools=[{"name": "lookup", "description": "look up", "input_schema": {"type": "object", "properties": {}}}],
    )
    assert counted.input_tokens == 77
    q = stages.tokenize[-1]
    assert (q.tenant, q.user, q.model, q.text, q.system, q.ids) == ("acme", "ann", MODEL, "now", "be brief", False)
    assert [(m.role, m.content) for m in q.messages] == [("user", "earlier"), ("assistant", "ok")]
    assert [t["name"] for t in q.client_tools] == ["lookup"]
    # A final assistant message is counted as the prefill the answer would continue.
    await client.messages.count_tokens(
        model=MODEL,
        messages=[{"role": "user", "content": "now"}, {"role": "assistant", "content": "Sure,"}],
    )
    q = stages.tokenize[-1]
    assert (q.text, q.messages, q.prefill) == ("now", [], "Sure,")


async def test_tokenize_continues_the_final_message_as_vllm_does(gw: Gateway, stages: Stages) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi,"}],
        "continue_final_message": True,
    }
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        r = await c.post("/tokenize", json=body)
        assert r.status_code == 200
        q = stages.tokenize[-1]
        assert (q.text, q.prefill, q.add_generation_prompt) == ("hello", "Hi,", False)
        r = await c.post("/tokenize", json={**body, "add_generation_prompt": True})
        assert r.status_code == 400 and "Cannot set both" in r.json()["error"]["message"]


async def test_tokenize_splits_messages_as_the_chat_route_does(gw: Gateway, stages: Stages) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "developer", "content": "sys"}, {"role": "user", "content": "hello"}],
        "add_generation_prompt": False,
        "add_special_tokens": True,  # accepted: the engine's own BOS rule always applies
    }
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        r = await c.post("/tokenize", json=body)
        assert r.status_code == 200 and r.json() == {"count": 77, "max_model_len": 2048, "tokens": list(range(77))}
        q = stages.tokenize[-1]
        assert (q.system, q.text, q.messages, q.add_generation_prompt, q.prompt) == ("sys", "hello", [], False, None)
        # Bad input is refused here, before context is asked: 400s, never a 500.
        asked = len(stages.tokenize)
        lone = {"model": MODEL, "messages": [{"role": "user", "content": "a\ud800"}, {"role": "user", "content": "b"}]}
        for bad in (
            {"model": MODEL, "prompt": "x", "messages": [{"role": "user", "content": "y"}]},
            {"model": MODEL, "messages": [{"role": "assistant", "content": "y"}]},
            {"model": MODEL, "prompt": "\ud800"},
            {"model": MODEL, "prompt": "x", "continue_final_message": True},
            {"model": MODEL, "prompt": "x", "add_generation_prompt": "yes"},
        ):
            r = await post(c, "/tokenize", bad)
            assert r.status_code == 400, (bad, r.text)
        assert len(stages.tokenize) == asked
        r = await post(c, "/tokenize", {"prompt": "  "})  # blank is a prompt too (of whitespace tokens)
        assert r.status_code == 200 and stages.tokenize[-1].prompt == "  "
        r = await post(c, "/tokenize", {"prompt": "x" * (gw.settings.max_input_chars + 1)})
        assert r.status_code == 413
        asked = len(stages.tokenize)
        r = await post(c, "/tokenize", lone)  # a lone surrogate in an earlier message
        assert r.status_code == 400 and "Unicode" in r.json()["error"]["message"]
        assert len(stages.tokenize) == asked
        r = await c.post(
            "/v1/messages/count_tokens", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
        )
        assert r.status_code == 404 and r.json()["type"] == "error"  # the Anthropic envelope, as on /v1/messages
        r = await c.post("/detokenize", json={"tokens": list(range(gw.settings.max_detokenize_tokens + 1))})
        assert r.status_code == 413


async def test_embeddings_rows_and_refusals(gw: Gateway, stages: Stages) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    got = await client.embeddings.create(model=EMBEDDING, input=["a", "b"], encoding_format="float", user="u-1")
    assert stages.embed[-1].texts == ["a", "b"] and stages.embed[-1].tenant == "acme"
    assert got.data[1].embedding[:2] == [384.0, 385.0] and got.usage.prompt_tokens == 60
    asked = len(stages.embed)
    for bad, status in (
        ({"input": ""}, 400),
        ({"input": []}, 400),
        ({"input": ["ok", "  "]}, 400),
        ({"input": [1, 2, 3]}, 400),
        ({"input": "x" * (gw.settings.embeddings_max_input_chars + 1)}, 413),
        ({"input": ["x"] * (gw.settings.embeddings_max_inputs + 1)}, 413),
        ({"input": "x", "encoding_format": "int8"}, 400),
        ({"input": "x", "dimensions": 512}, 400),
        ({"input": ["ok", "a\ud800"]}, 400),
    ):
        async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
            r = await post(c, "/v1/embeddings", {"model": EMBEDDING, **bad})
        assert r.status_code == status, (bad, r.text)
    assert len(stages.embed) == asked


async def test_embeddings_take_the_keys_limits(nats_server: NatsServer, stages: Stages, tmp_path: Path) -> None:
    async with gateway(nats_server, tmp_path, tiers=tiny_tiers()) as g:
        _, key = await g.keys.create("emb", "pro")  # 50 tokens a minute
        client = openai.AsyncOpenAI(base_url=f"{g.url}/v1", api_key=key, max_retries=0)
        await client.embeddings.create(model=EMBEDDING, input=["a", "b"])  # 60 tokens debited
        with pytest.raises(openai.RateLimitError) as e:
            await client.embeddings.create(model=EMBEDDING, input="c")
        assert "tokens" in e.value.message
        _, free = await g.keys.create("emb-free", "free")  # 3 requests a minute
        async with httpx.AsyncClient(base_url=g.url, headers={"Authorization": f"Bearer {free}"}) as c:
            codes = [(await c.post("/tokenize", json={"prompt": "x"})).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
