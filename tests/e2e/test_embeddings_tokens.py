"""Embeddings and token counting on the real stack: `POST /v1/embeddings` through the official openai SDK
(MiniLM in the tools service, keys, limits and a request record), `/tokenize` and `/detokenize` in vLLM's
shape, and Anthropic's `messages.count_tokens`, each count equal to what the engine reports for the same
messages on a real chat request."""

from __future__ import annotations

import base64
from typing import cast

import anthropic
import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from switchyard.cli.stack import Stack
from tests.e2e.conftest import admin_record

MODEL = "SmolLM2-135M-Instruct"
EMBEDDING = "all-MiniLM-L6-v2"
# Nothing here plans a tool or asks for reasoning: the prompt the engine reads is the one context renders.
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "Say one short word please."},
]


def _openai(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0)


def test_embeddings_through_the_sdk_float_and_base64(stack: Stack) -> None:
    client = _openai(stack)
    texts = ["The cat sat on the mat.", "A kitten is sitting on a rug.", "Quarterly revenue rose by 4 percent."]
    raw = client.embeddings.with_raw_response.create(model=EMBEDDING, input=texts, encoding_format="float")
    floats = raw.parse()
    assert floats.object == "list" and floats.model == EMBEDDING
    assert [d.index for d in floats.data] == [0, 1, 2] and all(d.object == "embedding" for d in floats.data)
    vecs = np.array([d.embedding for d in floats.data])
    assert vecs.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)  # MiniLM's unit vectors
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.5 > sims[0, 2]  # a paraphrase is near, another topic is far
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 3 * 2  # [CLS] and [SEP] each, and words

    # Left unsaid, the SDK asks for base64 and decodes it itself; the same float32 values either way.
    decoded = client.embeddings.create(model=EMBEDDING, input=texts)
    np.testing.assert_array_equal(
        np.array([d.embedding for d in decoded.data], dtype=np.float32), vecs.astype(np.float32)
    )
    # Asked for explicitly, the SDK hands the strings over: little-endian float32, one per row.
    b64 = client.embeddings.create(model=EMBEDDING, input=texts, encoding_format="base64")
    rows = [np.frombuffer(base64.b64decode(cast(str, d.embedding)), dtype="<f4") for d in b64.data]
    np.testing.assert_array_equal(np.stack(rows), vecs.astype(np.float32))
    one = client.embeddings.create(model=f"sentence-transformers/{EMBEDDING}", input=texts[2], dimensions=384)
    assert len(one.data) == 1 and np.allclose(one.data[0].embedding, vecs[2], atol=1e-5)

    # Through the pipeline's own path: a record of the request, with its usage, for the admin.
    rid = raw.headers["x-request-id"]
    rec = admin_record(stack, rid, lambda r: r["record"].get("status") == "complete")["record"]
    assert rec["api"] == "embeddings" and rec["model"] == EMBEDDING and rec["key_id"]
    assert rec["usage"]["prompt_tokens"] == floats.usage.prompt_tokens
    assert [m["content"] for m in rec["request"]["messages"]] == texts


def test_embeddings_refusals(stack: Stack) -> None:
    client = _openai(stack)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMBEDDING, input="hi", dimensions=128)
    assert "dimensions" in e.value.message and "384" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMBEDDING, input=[[101, 2023, 102]])
    assert "token ids" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL, input="hi")
    assert "chat model" in e.value.message
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="hi")
    with pytest.raises(openai.BadRequestError) as e:  # the encoder reads 256 tokens: longer is refused, not cut
        client.embeddings.create(model=EMBEDDING, input=["short", "word " * 400])
    assert "input[1]" in e.value.message and "256" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=EMBEDDING, input="hi", extra_body={"truncate": True})
    assert "truncate" in e.value.message
    with pytest.raises(openai.APIStatusError) as big:
        client.embeddings.create(model=EMBEDDING, input=["x"] * 1000)
    assert big.value.status_code == 413
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{stack.url}/v1", api_key="sy-wrong", max_retries=0).embeddings.create(
            model=EMBEDDING, input="hi"
        )


def test_tokenize_counts_what_the_engine_reads(stack: Stack, client: httpx.Client) -> None:
    tok = client.post("/tokenize", json={"model": MODEL, "messages": MESSAGES})
    assert tok.status_code == 200, tok.text
    body = tok.json()
    assert body["count"] == len(body["tokens"]) > 10 and body["max_model_len"] == 2048

    answer = _openai(stack).chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    assert answer.usage is not None and answer.usage.prompt_tokens == body["count"]

    back = client.post("/detokenize", json={"model": MODEL, "tokens": body["tokens"]})
    assert back.status_code == 200 and back.json()["prompt"].endswith(
        "Say one short word please.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tokenize_and_detokenize_round_trip(client: httpx.Client) -> None:
    text = "Round trips keep ünïcode, emoji 🚀 and   spacing.\n"
    tok = client.post("/tokenize", json={"model": MODEL, "prompt": text, "return_token_strs": True}).json()
    assert tok["count"] == len(tok["tokens"]) == len(tok["token_strs"])
    back = client.post("/detokenize", json={"model": MODEL, "tokens": tok["tokens"]})
    assert back.json() == {"prompt": text}

    assert client.post("/tokenize", json={"model": "nope", "prompt": "x"}).status_code == 404
    assert client.post("/tokenize", json={"model": MODEL}).status_code == 400  # neither prompt nor messages
    assert client.post("/tokenize", json={"prompt": "x", "chat_template": "{{ x }}"}).status_code == 400
    assert client.post("/detokenize", json={"tokens": [1, 2**40]}).status_code == 400
    assert client.post("/detokenize", json={"tokens": [10**8]}).status_code == 400  # not in the vocabulary
    assert httpx.post(f"{client.base_url}/tokenize", json={"prompt": "x"}).status_code == 401


def test_anthropic_count_tokens_matches_the_message_usage(stack: Stack) -> None:
    client = anthropic.Anthropic(base_url=stack.url, api_key=stack.api_key, max_retries=0)
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": [{"type": "text", "text": "Say one short word please."}]},
    ]
    counted = client.messages.count_tokens(model=MODEL, system="You are terse.", messages=messages)
    sent = client.messages.create(model=MODEL, system="You are terse.", messages=messages, max_tokens=4)
    assert counted.input_tokens == sent.usage.input_tokens + (sent.usage.cache_read_input_tokens or 0) > 10

    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-nope", messages=messages)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=[{"role": "assistant", "content": "x"}])
