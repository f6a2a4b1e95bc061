"""The simulated engine: the engine interface, continuous batching, real sentences, cancel, timing table."""

from __future__ import annotations

import asyncio

import pytest

from switchyard.libs.engine import EngineConfig, SamplingParams, StreamChunk, create_engine
from switchyard.libs.engine.sim import SimEngine, SimTiming
from tests.wait import wait_for


def sim(tpot_ms: float = 1.0, ttft_ms: float = 2.0) -> SimEngine:
    engine = create_engine(EngineConfig(kind="sim", sim_tpot_ms=tpot_ms, sim_ttft_ms=ttft_ms))
    assert isinstance(engine, SimEngine)
    return engine


async def run(engine: SimEngine, rid: str, max_tokens: int, **kw: object) -> list[StreamChunk]:
    params = SamplingParams(max_tokens=max_tokens, **kw)  # type: ignore[arg-type]
    return [c async for c in engine.generate(rid, "Where is my order?", params)]


async def test_streams_real_sentences_one_token_a_step() -> None:
    engine = sim()
    await engine.start()
    try:
        chunks = await run(engine, "r1", 40)
    finally:
        await engine.stop()
    ids = [t for c in chunks for t in c.token_ids]
    text = "".join(c.text for c in chunks)
    assert len(ids) == 40 and all(len(c.token_ids) == 1 for c in chunks)
    # The pieces spell what the real tokenizer decodes from the ids: text a reader (and safety_out) can read.
    assert text == engine.tokenizer.decode(ids).lstrip()
    assert "." in text and text[0].isupper()
    last = chunks[-1]
    assert last.finished and last.finish_reason == "length" and not any(c.finished for c in chunks[:-1])
    assert last.usage is not None and last.usage.completion_tokens == 40
    assert last.usage.prompt_tokens == len(engine.tokenizer.encode("Where is my order?"))
    assert last.usage.ttft_s is not None and last.usage.tpot_s is not None


async def test_same_request_same_text_and_batches_join_per_step() -> None:
    engine = sim()
    await engine.start()
    try:
        first = await run(engine, "same", 12)
        long = asyncio.create_task(run(engine, "long", 30))
        # The second request joins a batch that is already stepping.
        await wait_for(lambda: engine.metrics().running == 1, what="the long request stepping", interval=0.001)
        again = await run(engine, "same", 12)
        await long
    finally:
        await engine.stop()
    assert "".join(c.text for c in first) == "".join(c.text for c in again)
    m = engine.metrics()
    assert m.max_batch_size_seen == 2 and m.running == 0 and m.waiting == 0
    assert m.generated_tokens == 12 + 12 + 30


async def test_cancel_ends_the_stream_and_frees_the_slot() -> None:
    engine = sim()
    await engine.start()
    try:
        got: list[StreamChunk] = []
        async for c in engine.generate("c1", "Hi", SamplingParams(max_tokens=10_000)):
            got.append(c)
            if len(got) == 3:
                engine.cancel("c1")
    finally:
        await engine.stop()
    assert got[-1].finished and got[-1].finish_reason == "cancelled"
    assert len(got) < 10 and engine.metrics().running == 0


async def test_logprobs_one_entry_per_token() -> None:
    engine = sim()
    await engine.start()
    try:
        chunks = await run(engine, "lp", 5, logprobs=3)
    finally:
        await engine.stop()
    entries = [e for c in chunks for e in (c.logprobs or [])]
    assert [e.token_id for e in entries] == [t for c in chunks for t in c.token_ids]
    assert all(len(e.top) == 3 for e in entries)


def test_step_time_follows_the_table() -> None:
    t = SimTiming.of(10.0, 0.0, "1:4,101:14")
    assert t.step_s(1) == pytest.approx(0.004)
    assert t.step_s(51) == pytest.approx(0.009)
    assert t.step_s(201) == pytest.approx(0.024)  # past the table: its last slope goes on
    assert SimTiming.of(10.0, 2.5, "1:4").step_s(500) == pytest.approx(0.0025)
    with pytest.raises(ValueError):
        SimTiming.of(10.0, 0.0, "0:4")


async def test_a_consumer_a_step_behind_gets_every_token_once_in_order() -> None:
    """Chunks that wait for a slow consumer come merged (one frame per read), never lost or reordered."""
    engine = sim(tpot_ms=1.0)
    await engine.start()
    try:
        alone = await run(engine, "merge", 60)
        merged: list[StreamChunk] = []
        async for c in engine.generate("merge", "Where is my order?", SamplingParams(max_tokens=60)):
            merged.append(c)
            await asyncio.sleep(0.004)  # a busy consumer: several steps pass between reads
    finally:
        await engine.stop()
    assert len(merged) < len(alone)
    assert [t for c in merged for t in c.token_ids] == [t for c in alone for t in c.token_ids]
    assert "".join(c.text for c in merged) == "".join(c.text for c in alone)
    assert merged[-1].finished and merged[-1].usage is not None and merged[-1].usage.completion_tokens == 60


async def test_top_k_and_min_p_are_accepted_and_change_nothing() -> None:
    engine = sim()
    await engine.start()
    try:
        plain = await run(engine, "r", 12, temperature=0.9, seed=4)
        filtered = await run(engine, "r", 12, temperature=0.9, seed=4, top_k=5, min_p=0.2)
    finally:
        await engine.stop()
    # The sim writes canned sentences: sampling parameters are taken and ignored, never refused.
    assert [c.text for c in filtered] == [c.text for c in plain] and filtered[-1].finish_reason == "length"


async def test_a_stop_string_ends_the_answer_before_it() -> None:
    engine = sim()
    await engine.start()
    try:
        whole = "".join(c.text for c in await run(engine, "r-stop", 60))
        chunks = await run(engine, "r-stop", 60, stop=["."])
    finally:
        await engine.stop()
    text = "".join(c.text for c in chunks)
    # The same request id starts at the same sentence: the answer is the text up to its first full stop.
    assert "." in whole and text == whole[: whole.index(".")], (text, whole)
    assert chunks[-1].finished and chunks[-1].finish_reason == "stop"


async def test_a_cancel_for_a_finished_request_leaves_the_engine_serving() -> None:
    # A late cancel (the consumer hangs up after the last token) reaches an idle engine; the next
    # request must still be served, not wait forever behind a loop that stopped.
    engine = sim()
    await engine.start()
    try:
        await run(engine, "done", 4)
        engine.cancel("done")
        await wait_for(lambda: not engine._wake.is_set(), what="the engine idle again", interval=0.001)
        chunks = await asyncio.wait_for(run(engine, "next", 4), 5)
    finally:
        await engine.stop()
    assert chunks[-1].finish_reason == "length"


async def test_a_loop_that_stops_ends_what_it_held_with_an_error() -> None:
    engine = sim(tpot_ms=50.0)
    await engine.start()
    held = asyncio.create_task(run(engine, "held", 100))
    await wait_for(lambda: engine.metrics().running == 1, what="the request stepping", interval=0.001)
    await engine.stop()
    chunks = await asyncio.wait_for(held, 5)
    assert chunks[-1].finished and chunks[-1].finish_reason == "error"
    after = await asyncio.wait_for(run(engine, "after", 4), 5)
    assert after[-1].finish_reason == "error"
