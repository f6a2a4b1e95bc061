"""The async surface: concurrent streams, cancel, stop strings, sampling options."""

import asyncio
import random
import threading

import pytest

from switchyard.libs.engine import EngineConfig, SamplingParams, StreamChunk, create_engine
from switchyard.libs.engine.engine import NativeEngine
from switchyard.libs.engine.request import TextStream
from tests.engine.conftest import make_engine, tiny_model
from tests.wait import wait_for


async def _collect(eng, rid, prompt, params) -> tuple[str, list[int], StreamChunk]:
    text, ids = "", []
    async for c in eng.generate(rid, prompt, params):
        text += c.text
        ids += c.token_ids
        if c.finished:
            return text, ids, c
    raise AssertionError("stream ended without a final chunk")


@pytest.fixture
async def tiny_engine(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=256)
    await eng.start()
    yield eng
    await eng.stop()


def _prompt(n, seed):
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


async def test_concurrent_streams_and_usage(tiny_engine):
    params = SamplingParams(max_tokens=12)
    results = await asyncio.gather(*(_collect(tiny_engine, f"s{i}", _prompt(8 + i, i), params) for i in range(6)))
    for _text, ids, final in results:
        assert len(ids) == 12
        assert final.finish_reason == "length"
        u = final.usage
        assert u is not None and u.completion_tokens == 12 and u.ttft_s is not None and u.tpot_s is not None
    m = tiny_engine.metrics()
    assert m.max_batch_size_seen >= 2
    assert m.running == 0 and m.kv_blocks_used == 0


async def test_cancel_frees_blocks_at_next_step(tiny_engine):
    chunks = []
    async for c in tiny_engine.generate("c", _prompt(10, 7), SamplingParams(max_tokens=10_000)):
        chunks.append(c)
        if len(chunks) == 2:
            tiny_engine.cancel("c")
        if c.finished:
            break
    assert chunks[-1].finish_reason == "cancelled"
    # The engine thread keeps stepping (about a millisecond a step on the tiny model) until it
    # sees the cancel, so a few more chunks may already be queued; an ignored cancel would run
    # on towards max_tokens.
    assert len(chunks) < 100
    await wait_for(lambda: tiny_engine.metrics().kv_blocks_used == 0, timeout=5, what="the cancelled blocks freed")
    assert tiny_engine.metrics().kv_blocks_used == 0


async def test_abandoned_stream_is_cancelled(tiny_engine):
    agen = tiny_engine.generate("gone", _prompt(10, 8), SamplingParams(max_tokens=10_000))
    await agen.__anext__()
    await agen.aclose()
    await wait_for(lambda: tiny_engine.metrics().running == 0, what="the abandoned stream cancelled")
    assert tiny_engine.metrics().running == 0


async def test_seeded_sampling_is_reproducible(tiny_engine):
    p = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, seed=123, max_tokens=10)
    a = await _collect(tiny_engine, "x1", _prompt(6, 9), p)
    b = await _collect(tiny_engine, "x2", _prompt(6, 9), p)
    c = await _collect(tiny_engine, "x3", _prompt(6, 9), SamplingParams(temperature=1.0, seed=7, max_tokens=10))
    assert a[1] == b[1]
    assert c[1] != a[1]


async def test_empty_prompt_is_an_error(tiny_engine):
    _t, _ids, final = await _collect(tiny_engine, "e", [], SamplingParams())
    assert final.finish_reason == "error"


def test_stop_strings_never_leak(tokenizer):
    ids = tokenizer.encode("Hello there. END of story")
    ts = TextStream(tokenizer, ["END"], set())
    out = "".join(ts.push([i]) for i in ids)
    assert out == "Hello there. "
    assert ts.stopped
    ts2 = TextStream(tokenizer, ["ENDX"], set())
    out2 = "".join(ts2.push([i]) for i in ids) + ts2.push([], final=True)
    assert out2 == "Hello there. END of story"


def test_create_engine_kinds():
    with pytest.raises(ValueError):
        create_engine(EngineConfig(kind="nope"))


async def test_cancel_before_iteration_starts(tiny_engine):
    agen = tiny_engine.generate("early", _prompt(5, 11), SamplingParams(max_tokens=50))
    tiny_engine.cancel("early")
    chunks = [c async for c in agen]
    assert [c.finish_reason for c in chunks] == ["cancelled"]


async def test_stop_finishes_open_streams(tiny):
    eng = make_engine(tiny, block_size=4, num_blocks=64)
    await eng.start()
    agen = eng.generate("s", _prompt(5, 12), SamplingParams(max_tokens=10_000))
    first = await agen.__anext__()
    assert not first.finished
    await eng.stop()
    rest = [c async for c in agen]
    assert rest[-1].finished and rest[-1].finish_reason == "cancelled"


def test_package_import_is_cheap():
    import os
    import subprocess
    import sys

    code = "import sys, switchyard.libs.engine; assert 'torch' not in sys.modules, 'torch imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd())


async def test_the_model_loads_on_the_engine_thread_that_steps():
    # One thread for every torch call: a team of OpenMP threads per calling thread, and a
    # second team left behind by loading elsewhere made multi-threaded steps 2-3x slower.
    eng = NativeEngine(EngineConfig(dtype="fp32", num_blocks=16))
    seen: list[str] = []

    def load() -> None:
        seen.append(threading.current_thread().name)
        eng.build_with_model(tiny_model())

    eng._load = load  # type: ignore[method-assign]
    await eng.start()
    try:
        async for c in eng.generate("t", _prompt(6, 3), SamplingParams(max_tokens=2)):
            if c.finished:
                seen.append(c.finish_reason or "")
    finally:
        await eng.stop()
    assert seen == ["engine-step", "length"]
