"""Greedy output must be token-identical to Hugging Face transformers (fp32 on both sides)."""

import asyncio

import pytest
import torch

from switchyard.libs.engine import SamplingParams
from tests.engine.conftest import make_engine

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
]
NEW_TOKENS = 20


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}])) for q in QUESTIONS]


@pytest.fixture(scope="module")
def hf_outputs(hf_model, prompts, tokenizer):
    outs = []
    for ids in prompts:
        with torch.no_grad():
            gen = hf_model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                eos_token_id=sorted(tokenizer.eos_token_ids),
                pad_token_id=0,
            )
        outs.append(gen[0, len(ids) :].tolist())
    return outs


async def _run(eng, rid, ids):
    got = []
    async for c in eng.generate(rid, ids, SamplingParams(max_tokens=NEW_TOKENS)):
        got += c.token_ids
        if c.finished:
            return got
    return got


async def test_greedy_matches_transformers_alone(fp32_model, prompts, hf_outputs):
    eng = make_engine(fp32_model, num_blocks=128)
    await eng.start()
    try:
        for i, ids in enumerate(prompts):
            assert await _run(eng, f"alone{i}", ids) == hf_outputs[i]
    finally:
        await eng.stop()


async def test_greedy_matches_transformers_in_a_shared_batch(fp32_model, prompts, hf_outputs, tokenizer):
    # A small token budget forces chunked prefills to share steps with other sequences' decodes.
    eng = make_engine(fp32_model, num_blocks=128, max_num_batched_tokens=24)
    await eng.start()
    try:
        other = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "Tell me a story."}]))
        results = await asyncio.gather(
            _run(eng, "noise0", other),
            *(_run(eng, f"b{i}", ids) for i, ids in enumerate(prompts)),
            _run(eng, "noise1", other[:-3]),
        )
        assert results[1:-1] == hf_outputs
        assert eng.metrics().max_batch_size_seen >= 4
    finally:
        await eng.stop()
