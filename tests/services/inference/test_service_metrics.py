"""The inference service on a real nats-server, with the real model: its scrape target counts what it served."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.embedded import free_port
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import RawChunk, Sampling, StreamOpen, StreamOpenAck, Work, subjects
from switchyard.schemas.frames import StepFrame, decode_step
from switchyard.services.inference.service import setup
from switchyard.services.inference.settings import InferenceSettings
from tests.services.inference.test_inference_metrics import Scrape, scrape

# The engine tests' converted-weights cache, so the model loads without converting again.
CACHE_DIR = os.path.abspath(os.path.join("var", "cache", "engine"))

# Long enough to fill two 16-token blocks, so a repeat is served from the prefix cache.
PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant who answers in one short sentence.<|im_end|>\n"
    "<|im_start|>user\nName one planet of the solar system and one fact about it.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@dataclass
class Replica:
    client: Bus
    replica: str
    port: int

    async def answer(self, text: str, max_tokens: int = 6) -> RawChunk:
        """Send one request straight to the replica; returns its final chunk."""
        rid = uuid.uuid4().hex
        done: asyncio.Future[RawChunk] = asyncio.get_running_loop().create_future()

        async def on_chunk(chunk: list[StepFrame] | RawChunk) -> None:
            if isinstance(chunk, RawChunk) and chunk.rid == rid and chunk.finished and not done.done():
                done.set_result(chunk)

        steps = subjects.stream_steps("t1", self.replica)
        sub = await self.client.watch_frames(steps, decode_step, on_chunk)
        await self.client.flush()
        work = Work(
            rid=rid,
            tenant="acme",
            user="ann",
            key_id="k1",
            text="planet",
            prompt=text,
            sampling=Sampling(max_tokens=max_tokens, ignore_eos=True),
        )
        await self.client.publish(subjects.infer("default", self.replica), work)
        try:
            return await asyncio.wait_for(done, 120)
        finally:
            await sub.unsubscribe()


@pytest.fixture(scope="module")
async def replica(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replica]:
    name = uuid.uuid4().hex[:8]
    bus = await Bus.connect(nats_server.url, "inference", name, setup_tracing("inference"))
    await bus.ensure_log_stream()
    client = await Bus.connect(nats_server.url, "safety_out", "t1", setup_tracing("safety_out"))

    async def ack(req: StreamOpen) -> StreamOpenAck:
        return StreamOpenAck(rid=req.work.rid, replica="t1")

    await client.subscribe(subjects.SAFETY_OUT, StreamOpen, ack)
    await client.flush()
    port = free_port()
    settings = InferenceSettings(
        nats_url=nats_server.url,
        data_dir=str(tmp_path_factory.mktemp("inference")),
        cache_dir=CACHE_DIR,
        dtype="int8",
        max_model_len=1024,
        max_num_seqs=4,
        metrics_port=port,
    )
    cleanup = await setup(bus, settings)
    assert cleanup is not None
    try:
        yield Replica(client, name, port)
    finally:
        await cleanup()
        await bus.drain()
        await client.drain()


async def test_replica_scrape_target_counts_its_requests(replica: Replica) -> None:
    before = await scrape(replica.port)
    assert before.value("vllm:request_success_total", finished_reason="length") == 0
    first = await replica.answer(PROMPT)
    second = await replica.answer(PROMPT)
    assert first.finish_reason == second.finish_reason == "length"
    assert first.usage is not None and second.usage is not None
    assert second.usage.cached_tokens > 0

    m: Scrape = await scrape(replica.port)
    assert m.value("vllm:request_success_total", finished_reason="length") == 2
    assert m.value("vllm:time_to_first_token_seconds_count") == 2
    assert m.value("vllm:e2e_request_latency_seconds_count") == 2
    assert m.value("vllm:inter_token_latency_seconds_count") == 2 * 5
    assert m.value("vllm:generation_tokens_total") == 2 * 6
    assert m.value("vllm:prompt_tokens_total") == first.usage.prompt_tokens + second.usage.prompt_tokens
    assert m.value("vllm:prefix_cache_hits_total") == second.usage.cached_tokens
    assert m.value("vllm:prefix_cache_queries_total") >= 2 * first.usage.prompt_tokens
    assert m.value("vllm:num_requests_running") == 0
    # The series name the model as the replica serves it (the router's and the API's model id).
    assert {s["model_name"] for s in m.labels_of("vllm:generation_tokens_total")} == {"SmolLM2-135M-Instruct"}
    assert m.value("switchyard_engine_generated_tokens") == 2 * 6
