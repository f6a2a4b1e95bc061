"""The registry in the bus's key-value store: seeded from the settings, reset by the supervisor, and followed
live by every reader through the same `ModelRegistry` object."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.models import GEMMA_MODEL_NAME, ModelRegistry
from switchyard.libs.models.live import LiveModels, open_models, reset, seed, with_entry
from switchyard.libs.telemetry import setup_tracing
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from switchyard.schemas import ModelCard


async def _bus(server: NatsServer) -> Bus:
    return await Bus.connect(server.url, "test", uuid.uuid4().hex[:6], setup_tracing("test"))


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await _bus(nats_server)
    yield b
    await b.close()


@pytest.fixture
def bucket() -> str:
    """A bucket of the test's own: the session's server is shared, and its `models` bucket with it."""
    return f"models_{uuid.uuid4().hex[:8]}"


def added(name: str = "added", pool: str = "added") -> ModelCard:
    return ModelCard(name=name, pool=pool, path="/models/added.gguf", aliases=[f"{name}-alias"])


def test_with_entry_replaces_in_place_adds_at_the_end_and_removes() -> None:
    a, b = ModelCard(name="a", pool="pa"), ModelCard(name="b", pool="pb")
    b2 = ModelCard(name="b2", pool="pb")
    assert [c.name for c in with_entry([a, b], "pb", b2)] == ["a", "b2"]
    assert [c.name for c in with_entry([a], "pb", b)] == ["a", "b"]
    assert [c.name for c in with_entry([a, b], "pa", None)] == ["b"]


async def test_an_empty_bucket_is_seeded_from_the_settings_and_a_full_one_is_left_as_it_is(
    bus: Bus, bucket: str
) -> None:
    kv = await open_models(bus, bucket)
    settings = ModelRegistry()
    await seed(kv, settings)
    assert {k: c.name for k, c in (await kv.items()).items()} == {c.pool: c.name for c in settings.models}
    await kv.delete(settings.get(GEMMA_MODEL_NAME).pool)
    await seed(kv, settings)  # not empty: an operator's removal stands
    assert [c.name for c in (await kv.items()).values()] == [DEFAULT_MODEL_NAME]
    # A reader opening the bucket takes it as it is, not its own settings.
    mine = ModelRegistry()
    live = await LiveModels.follow(bus, mine, bucket=bucket)
    # The bucket's snapshot, or under load the watch's replay of it right after, replaces the settings'.
    assert await live.wait_for(lambda r: r.names() == [DEFAULT_MODEL_NAME], 10.0), mine.names()
    await live.close()


async def test_a_reader_s_own_fallbacks_apply_over_the_shared_entries(bus: Bus, bucket: str) -> None:
    kv = await open_models(bus, bucket)
    await reset(kv, ModelRegistry())
    mine = ModelRegistry(model_fallbacks={GEMMA_MODEL_NAME: DEFAULT_MODEL_NAME})
    live = await LiveModels.follow(bus, mine, bucket=bucket)
    try:
        assert mine.get(GEMMA_MODEL_NAME).fallback == DEFAULT_MODEL_NAME
        await kv.put("gemma", ModelRegistry().get(GEMMA_MODEL_NAME).model_copy(update={"owner": "g"}))
        assert await live.wait_for(lambda r: r.get(GEMMA_MODEL_NAME).owner == "g", 5.0)
        assert mine.get(GEMMA_MODEL_NAME).fallback == DEFAULT_MODEL_NAME
        assert (await kv.get("gemma")).fallback is None  # type: ignore[union-attr]
    finally:
        await live.close()


async def test_reset_makes_the_bucket_the_settings_entries(bus: Bus, bucket: str) -> None:
    kv = await open_models(bus, bucket)
    await kv.put("stale", added(pool="stale"))
    await reset(kv, ModelRegistry())
    assert sorted(c.name for c in (await kv.items()).values()) == sorted(ModelRegistry().names())


async def test_every_reader_sees_an_entry_added_and_removed(bus: Bus, nats_server: NatsServer, bucket: str) -> None:
    kv = await open_models(bus, bucket)
    await reset(kv, ModelRegistry())
    other = await _bus(nats_server)
    readers = [ModelRegistry(), ModelRegistry()]
    lives = [
        await LiveModels.follow(bus, readers[0], bucket=bucket),
        await LiveModels.follow(other, readers[1], bucket=bucket),
    ]
    try:
        await kv.put("added", added())
        for live, registry in zip(lives, readers, strict=True):
            assert await live.wait_for(lambda r: r.find("added-alias") is not None, 5.0)
            # The API the readers use is the same; the default model leads, the new one comes last.
            assert registry.names() == [DEFAULT_MODEL_NAME, GEMMA_MODEL_NAME, "added"]
            assert registry.get("ADDED").pool == "added" and registry.default_model == DEFAULT_MODEL_NAME
        await kv.put("added", added().model_copy(update={"context_length": 2048}))
        assert await lives[1].wait_for(lambda r: r.get("added").context_length == 2048, 5.0)
        await kv.delete("added")
        for live in lives:
            assert await live.wait_for(lambda r: r.find("added") is None, 5.0)
        assert readers[0].names() == [DEFAULT_MODEL_NAME, GEMMA_MODEL_NAME]
        # An entry written under another pool's key is not taken.
        await kv.put("wrong", added())
        await kv.put("marker", added("marker", "marker"))
        assert await lives[0].wait_for(lambda r: r.find("marker") is not None, 5.0)
        assert readers[0].find("added") is None
    finally:
        for live in lives:
            await live.close()
        await other.close()
