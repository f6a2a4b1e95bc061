"""OpenAI details users hit (issue 30): vLLM's `top_k` and `min_p`, sent by the SDK in `extra_body`,
reach the engine's sampling parameters; out-of-range values are the SDK's BadRequestError."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from services.inference.phases import params_of
from tests.services.gateway.harness import Gateway, Responder

MODEL = "SmolLM2-135M-Instruct"
USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("extra", "top_k", "min_p"),
    [
        ({"top_k": 40, "min_p": 0.05}, 40, 0.05),
        ({"top_k": -1}, 0, 0.0),
        ({"top_k": 1, "min_p": 1}, 1, 1.0),
        ({}, 0, 0.0),
    ],
)
async def test_top_k_and_min_p_travel_to_the_engine(
    gw: Gateway, responder: Responder, extra: dict[str, Any], top_k: int, min_p: float
) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    resp = await oa.chat.completions.create(model=MODEL, messages=USER, temperature=0.8, extra_body=extra)  # type: ignore[arg-type]
    rid = resp.id.removeprefix("chatcmpl-")
    s = next(w for w in responder.works if w.rid == rid).sampling
    assert (s.top_k, s.min_p) == (top_k, min_p)
    p = params_of(s)
    assert (p.top_k, p.min_p) == (top_k, min_p)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"top_k": -2}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_k": "5"}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
    ],
)
async def test_bad_top_k_and_min_p_are_400(
    gw: Gateway, responder: Responder, extra: dict[str, Any], named: str
) -> None:
    oa = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.pro_key, max_retries=0)
    n = len(responder.works)
    with pytest.raises(openai.BadRequestError) as e:
        await oa.chat.completions.create(model=MODEL, messages=USER, extra_body=extra)  # type: ignore[arg-type]
    assert named in str(e.value)
    assert len(responder.works) == n  # refused before anything ran


async def test_anthropic_top_k_is_served(gw: Gateway, responder: Responder) -> None:
    an = anthropic.AsyncAnthropic(base_url=gw.url, api_key=gw.pro_key, max_retries=0)
    msg = await an.messages.create(model=MODEL, max_tokens=16, messages=USER, extra_body={"top_k": 5})  # type: ignore[arg-type]
    assert msg.content
    assert responder.works[-1].sampling.top_k == 5
    with pytest.raises(anthropic.BadRequestError, match="top_k"):
        await an.messages.create(model=MODEL, max_tokens=16, messages=USER, extra_body={"top_k": -3})  # type: ignore[arg-type]
