"""A `logit_bias` token id outside the model's vocabulary is a 400 naming the id, on chat completions and
completions, streamed or not. It once gave an empty 200: the engine refused the request and ended the
answer with nothing. The context stage, the first to hold the model's tokenizer, refuses it: tested there
over a real nats-server with the real tokenizer, and through the whole stack over HTTP."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from switchyard.schemas import ChatEvent, ErrorCode, Sampling, Work
from switchyard.schemas.messages import PromptMode
from tests.security.conftest import assert_error
from tests.services.context.conftest import harness, tokenizer  # noqa: F401  (the context stage's fixtures)
from tests.services.context.harness import Harness

MODEL = "SmolLM2-135M-Instruct"
VOCAB = 49152  # SmolLM2's tokenizer: ids 0 to 49151
ROUTES = [
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Say hi."}]}),
    ("/v1/completions", {"model": MODEL, "prompt": "The sky is"}),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "body"), ROUTES)
@pytest.mark.parametrize("bad", [VOCAB, 10**9, -1])
def test_a_bias_past_the_vocabulary_is_400_naming_it(
    client: httpx.Client, path: str, body: dict[str, Any], stream: bool, bad: int
) -> None:
    r = client.post(path, json={**body, "max_tokens": 4, "stream": stream, "logit_bias": {"42": 1.0, str(bad): 5.0}})
    assert_error(r, 400, "bad_request")
    message = r.json()["error"]["message"]
    assert "logit_bias" in message and f"token id {bad} " in message and str(VOCAB - 1) in message, message


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_bias_inside_the_vocabulary_is_served(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    """The last id of the vocabulary is still one: the bound is exact."""
    r = client.post(path, json={**body, "max_tokens": 4, "logit_bias": {"0": -100, str(VOCAB - 1): -100}})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    assert text and choice["finish_reason"] in ("stop", "length")


def _work(mode: PromptMode, bias: dict[int, float]) -> Work:
    return Work(
        rid=uuid.uuid4().hex,
        tenant="acme",
        user="ann",
        key_id="k",
        text="The sky is",
        prompt_mode=mode,
        sampling=Sampling(max_tokens=4, logit_bias=bias),
    )


@pytest.mark.parametrize("mode", ["chat", "raw"])
async def test_context_refuses_an_id_past_the_vocabulary(harness: Harness, mode: PromptMode) -> None:  # noqa: F811
    for bad in (VOCAB, 10**9, -1):
        got = await harness.assemble(_work(mode, {42: 1.0, bad: 5.0}))
        assert isinstance(got, ChatEvent) and got.error is not None, got
        assert got.error.code == ErrorCode.bad_request
        assert f"token id {bad} " in got.error.message and str(VOCAB - 1) in got.error.message, got.error.message
    # The vocabulary's first and last ids are served.
    ok = await harness.assemble(_work(mode, {0: -100.0, VOCAB - 1: -100.0}))
    assert isinstance(ok, Work) and ok.sampling.logit_bias == {0: -100.0, VOCAB - 1: -100.0}
