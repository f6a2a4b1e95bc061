from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.telemetry import setup_tracing
from switchyard.libs.tokenizer import Tokenizer, load_tokenizer
from switchyard.schemas import Work, WorkAccepted, subjects
from switchyard.services.context.service import setup
from switchyard.services.context.settings import ContextSettings
from tests.services.context.harness import Harness


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    """The real tokenizer and chat template of the bundled model (SmolLM2, ChatML)."""
    return load_tokenizer()


@pytest.fixture(scope="module")
async def harness(
    nats_server: NatsServer, tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Harness]:
    service = await Bus.connect(nats_server.url, "context", "t1", setup_tracing("context"))
    client = await Bus.connect(nats_server.url, "gateway", "t1", setup_tracing("gateway"))
    await service.ensure_log_stream()
    settings = ContextSettings(data_dir=str(tmp_path_factory.mktemp("context")), context_budget=2048)
    cleanup = await setup(service, settings, template=tokenizer)
    h = Harness(client, {}, {})

    async def collect(w: Work) -> None:
        await client.ack(WorkAccepted(rid=w.rid, replica="router"))  # as the router acks the hand-over
        fut = h.forwarded.get(w.rid)
        if fut is not None and not fut.done():
            fut.set_result(w)

    await client.subscribe(subjects.ROUTE, Work, collect)
    await client.flush()
    await service.flush()
    yield h
    await service.quiesce()
    await cleanup()
    await service.close()
    await client.drain()
