"""A replica's scrape target carries the engine's figures under vLLM's names (the real engine, a tiny model)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from switchyard.libs.bus.embedded import free_port
from switchyard.libs.engine import SamplingParams, StreamChunk
from switchyard.libs.engine.engine import NativeEngine
from switchyard.services.inference.metrics import InferenceMetrics, MeteredEngine, token_count_buckets
from tests.engine.conftest import make_engine, tiny_model

MODEL = "tiny-llama"


class Scrape:
    def __init__(self, text: str):
        self.text = text
        self.samples: list[Sample] = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def value(self, name: str, **labels: str) -> float:
        found = [s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()]
        assert len(found) == 1, f"{name}{labels}: {len(found)} series"
        return found[0]

    def labels_of(self, name: str) -> list[dict[str, str]]:
        return [s.labels for s in self.samples if s.name == name]


@pytest.fixture
async def served() -> AsyncIterator[tuple[NativeEngine, InferenceMetrics, int]]:
    engine = make_engine(tiny_model(), block_size=4, num_blocks=256, max_model_len=512)
    await engine.start()
    metrics = InferenceMetrics(engine, MODEL)
    port = free_port()
    metrics.serve(port)
    try:
        yield engine, metrics, port
    finally:
        metrics.close()
        await engine.stop()


async def scrape(port: int) -> Scrape:
    async with httpx.AsyncClient() as c:
        r = await c.get(f"http://127.0.0.1:{port}/metrics")
    assert r.status_code == 200
    return Scrape(r.text)


async def run(engine: MeteredEngine, rid: str, prompt: list[int], params: SamplingParams) -> StreamChunk:
    async for chunk in engine.generate(rid, prompt, params):
        if chunk.finished:
            return chunk
    raise AssertionError("no final chunk")


def prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


async def test_requests_are_counted_under_vllm_names(served: tuple[NativeEngine, InferenceMetrics, int]) -> None:
    _, metrics, port = served
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    repeated = prompt(24, 1)
    finals = [await run(metrics.engine, "a", repeated, params)]
    # The same prompt again: its full blocks come from the prefix cache.
    finals.append(await run(metrics.engine, "b", repeated, params))
    finals.append(await run(metrics.engine, "c", prompt(13, 2), params))
    assert [f.finish_reason for f in finals] == ["length"] * 3
    prompt_tokens = 24 + 24 + 13

    m = await scrape(port)
    assert m.value("vllm:request_success_total", finished_reason="length") == 3
    for reason in ("stop", "abort", "error"):
        assert m.value("vllm:request_success_total", finished_reason=reason) == 0
    assert m.value("vllm:time_to_first_token_seconds_count") == 3
    assert m.value("vllm:time_to_first_token_seconds_sum") > 0
    assert m.value("vllm:e2e_request_latency_seconds_count") == 3
    assert m.value("vllm:e2e_request_latency_seconds_bucket", le="+Inf") == 3
    # One inter-token gap per token after the first.
    assert m.value("vllm:inter_token_latency_seconds_count") == 3 * 7
    assert m.value("vllm:request_time_per_output_token_seconds_count") == 3
    assert m.value("vllm:generation_tokens_total") == 3 * 8
    assert m.value("vllm:prompt_tokens_total") == prompt_tokens
    assert m.value("vllm:request_prompt_tokens_sum") == prompt_tokens
    assert m.value("vllm:request_generation_tokens_sum") == 3 * 8

    hits, queries = m.value("vllm:prefix_cache_hits_total"), m.value("vllm:prefix_cache_queries_total")
    assert queries >= prompt_tokens and 0 < hits < queries
    assert hits == finals[1].usage.cached_tokens  # type: ignore[union-attr]
    assert m.value("vllm:num_requests_running") == 0 and m.value("vllm:num_requests_waiting") == 0
    assert m.value("vllm:kv_cache_usage_perc") == 0  # finished requests hold no block
    assert m.value("vllm:num_preemptions_total") == 0

    # Every vLLM series names the model as served and the engine, as vLLM does.
    for s in m.samples:
        if s.name.startswith("vllm:"):
            assert s.labels["model_name"] == MODEL and s.labels["engine"] == "0", s
    # The engine's own gauges are still there, unlabelled.
    assert m.value("switchyard_engine_generated_tokens") == 3 * 8
    assert m.value("switchyard_engine_prefix_cache_hits_tokens") == hits
    assert m.value("switchyard_engine_max_batch_size") >= 1


async def test_running_request_holds_kv_and_a_cancel_is_an_abort(
    served: tuple[NativeEngine, InferenceMetrics, int],
) -> None:
    _, metrics, port = served
    stream = metrics.engine.generate("long", prompt(20, 3), SamplingParams(max_tokens=400, ignore_eos=True))
    first = await anext(stream)
    assert first.token_ids and not first.finished
    m = await scrape(port)
    assert m.value("vllm:num_requests_running") == 1
    assert 0 < m.value("vllm:kv_cache_usage_perc") < 1
    assert m.value("vllm:time_to_first_token_seconds_count") == 1
    assert m.value("vllm:e2e_request_latency_seconds_count") == 0

    metrics.engine.cancel("long")
    async for chunk in stream:
        if chunk.finished:
            assert chunk.finish_reason == "cancelled"
            break
    m = await scrape(port)
    assert m.value("vllm:request_success_total", finished_reason="abort") == 1
    assert m.value("vllm:e2e_request_latency_seconds_count") == 1
    assert m.value("vllm:num_requests_running") == 0


async def test_a_consumer_that_leaves_is_an_abort(served: tuple[NativeEngine, InferenceMetrics, int]) -> None:
    _, metrics, port = served
    params = SamplingParams(max_tokens=400, ignore_eos=True)
    async with contextlib.aclosing(metrics.engine.generate("gone", prompt(9, 4), params)) as stream:
        async for _chunk in stream:
            break  # closing the stream cancels the request in the engine
    m = await scrape(port)
    assert m.value("vllm:request_success_total", finished_reason="abort") == 1
    assert m.value("vllm:e2e_request_latency_seconds_count") == 1


async def test_a_refused_request_counts_as_an_error(served: tuple[NativeEngine, InferenceMetrics, int]) -> None:
    _, metrics, port = served
    final = await run(metrics.engine, "empty", [], SamplingParams())
    assert final.finish_reason == "error"
    m = await scrape(port)
    assert m.value("vllm:request_success_total", finished_reason="error") == 1
    assert m.value("vllm:time_to_first_token_seconds_count") == 0
    assert m.value("vllm:prompt_tokens_total") == 0


def test_token_count_buckets_are_1_2_5_up_to_the_context() -> None:
    assert token_count_buckets(512) == [1, 2, 5, 10, 20, 50, 100, 200, 500]
    assert token_count_buckets(1000)[-1] == 1000
