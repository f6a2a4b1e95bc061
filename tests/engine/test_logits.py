"""Logit bias and the repetition penalties: their arithmetic, their effect on the real model's
greedy answers, and that a sequence's tokens do not depend on its batch mates."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from switchyard.libs.engine.logits import adjust_row, bad_bias_token
from switchyard.libs.engine.types import SamplingParams
from tests.engine.conftest import make_engine
from tests.engine.helpers import drive, make_request

# The small model's greedy continuation repeats the line pattern (issue 22's looping answer).
LOOPING = "Order 7 history:\n2026-11-01: status delivered\n2026-11-02: status delivered\n"


def test_the_arithmetic_is_openai_and_vllm() -> None:
    row = torch.tensor([2.0, -2.0, 1.0, 0.5, 3.0])
    adjust_row(row, SamplingParams(logit_bias={3: 10.0, 4: -100.0}), [], [])
    assert row.tolist() == [2.0, -2.0, 1.0, 10.5, -97.0]
    # Repetition: over prompt and output, divides a positive logit and multiplies a negative one.
    row = torch.tensor([2.0, -2.0, 1.0, 0.5])
    adjust_row(row, SamplingParams(repetition_penalty=2.0), [0, 1], [1])
    assert row.tolist() == [1.0, -4.0, 1.0, 0.5]
    # Frequency counts occurrences in the output only; presence counts once; the prompt is left alone.
    row = torch.tensor([1.0, 1.0, 1.0, 1.0])
    adjust_row(row, SamplingParams(frequency_penalty=0.5, presence_penalty=0.25), [3, 3], [0, 0, 0, 2])
    assert row.tolist() == [1.0 - 1.5 - 0.25, 1.0, 1.0 - 0.5 - 0.25, 1.0]


def test_a_bias_outside_the_vocabulary_is_named() -> None:
    assert bad_bias_token(SamplingParams(logit_bias={5: 1.0, 10: 1.0}), 10) == 10
    assert bad_bias_token(SamplingParams(logit_bias={9: 1.0}), 10) is None


@pytest.fixture(scope="module")
def real_engine(fp32_model):
    return make_engine(fp32_model, block_size=16, num_blocks=64)


@pytest.fixture(scope="module")
def looping_prompt(tokenizer) -> list[int]:
    return tokenizer.encode(LOOPING)


@pytest.fixture(scope="module")
def plain(real_engine, tokenizer, looping_prompt) -> list[int]:
    return _greedy(real_engine, looping_prompt, tokenizer.eos_token_ids)


def _greedy(eng, prompt: list[int], eos: set[int], n: int = 20, **kw) -> list[int]:
    return drive(eng, [make_request("r", prompt, max_tokens=n, eos=eos, **kw)])["r"]


def _repeats(ids: list[int]) -> int:
    return len(ids) - len(set(ids))


@pytest.mark.parametrize("penalty", [{"frequency_penalty": 2.0, "presence_penalty": 2.0}, {"repetition_penalty": 1.5}])
def test_penalties_change_a_looping_greedy_answer(real_engine, tokenizer, looping_prompt, plain, penalty) -> None:
    assert _repeats(plain) >= 8, tokenizer.decode(plain)  # the small model loops here
    damped = _greedy(real_engine, looping_prompt, tokenizer.eos_token_ids, **penalty)
    assert damped != plain
    assert _repeats(damped) < _repeats(plain), (tokenizer.decode(plain), tokenizer.decode(damped))


def test_logit_bias_bans_and_forces_a_token(real_engine, tokenizer, looping_prompt, plain) -> None:
    eos = tokenizer.eos_token_ids
    top = plain[0]
    banned = _greedy(real_engine, looping_prompt, eos, n=6, logit_bias={top: -100.0})
    assert top not in banned
    forced_id = tokenizer.encode(" banana")[-1]
    forced = _greedy(real_engine, looping_prompt, eos, n=4, logit_bias={forced_id: 100.0})
    assert forced == [forced_id] * 4


def test_a_sequence_does_not_depend_on_its_batch_mates(tiny) -> None:
    eng = make_engine(tiny, block_size=4, num_blocks=256)
    prompt = [101, 2002, 3003, 4004, 5005, 6006]
    params = {"frequency_penalty": 0.7, "presence_penalty": 0.3, "repetition_penalty": 1.2, "logit_bias": {7: 3.0}}
    alone = drive(eng, [make_request("a", prompt, max_tokens=16, **params)])["a"]
    mates = [
        make_request("b", [11, 12, 13], max_tokens=16, frequency_penalty=-1.0),
        make_request("a", prompt, max_tokens=16, **params),
        make_request("c", prompt[:4], max_tokens=16, logit_bias={alone[0]: -100.0}),
        make_request("d", prompt, max_tokens=16, temperature=1.0, seed=3, presence_penalty=2.0),
    ]
    together = drive(eng, mates)
    assert together["a"] == alone
    assert alone[0] not in together["c"]


async def _logprobs(eng, rid: str, prompt: list[int], params: SamplingParams) -> list:
    out = []
    async for c in eng.generate(rid, prompt, params):
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
        out += c.logprobs
    return out


async def test_logprobs_are_the_models_own_and_sum_sensibly(fp32_model, tokenizer, looping_prompt) -> None:
    eng = make_engine(fp32_model, block_size=16, num_blocks=64)
    await eng.start()
    try:
        # A bias changes what is sampled, not the reported distribution (vLLM's default: raw logprobs).
        params = SamplingParams(max_tokens=5, logprobs=4, logit_bias={tokenizer.encode(" banana")[-1]: 100.0})
        lps = await _logprobs(eng, "lp", looping_prompt, params)
    finally:
        await eng.stop()
    assert len(lps) == 5
    for t in lps:
        assert len(t.top) == 4 and all(v <= 0.0 for _, v in t.top)
        values = [v for _, v in t.top]
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-5
        assert t.logprob <= values[0]
    plain = SamplingParams(max_tokens=1, logprobs=1)
    eng = make_engine(fp32_model, block_size=16, num_blocks=64)
    await eng.start()
    try:
        (first,) = await _logprobs(eng, "greedy", looping_prompt, plain)
    finally:
        await eng.stop()
    # Greedy picks the most likely token, so its logprob is the top one's.
    assert first.top[0] == (first.token_id, first.logprob)


async def test_logprobs_do_not_depend_on_batch_mates(tiny) -> None:
    eng = make_engine(tiny, block_size=4, num_blocks=256)
    await eng.start()
    try:
        prompt = [101, 2002, 3003, 4004, 5005, 6006]
        params = SamplingParams(max_tokens=8, logprobs=3, temperature=0.9, seed=11)
        alone = await _logprobs(eng, "a1", prompt, params)
        mates = await asyncio.gather(
            _logprobs(eng, "a2", prompt, params),
            _logprobs(eng, "b", [7, 8, 9], SamplingParams(max_tokens=8, logprobs=1)),
            _logprobs(eng, "c", prompt[:3], SamplingParams(max_tokens=8, logprobs=0, frequency_penalty=1.0)),
        )
    finally:
        await eng.stop()
    # Same tokens and alternatives; the values agree to fp32 rounding (the batched forward pass itself
    # may move a logit's last bit, which no sampled token depends on).
    assert [(t.token_id, [i for i, _ in t.top]) for t in mates[0]] == [
        (t.token_id, [i for i, _ in t.top]) for t in alone
    ]
    for m, a in zip(mates[0], alone, strict=True):
        assert m.logprob == pytest.approx(a.logprob, abs=1e-5)
