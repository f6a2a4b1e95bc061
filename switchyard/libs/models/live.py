"""The registry as the bus's key-value store holds it, followed live.

The bucket `subjects.MODELS_BUCKET` has one entry per model, keyed by its pool (a subject token) with its
ModelCard as the value. The stack supervisor writes the settings' entries into it at start (`reset`) and adds
and removes entries for `/v1/admin/models`; a deployment without the supervisor gets the settings' entries
from whichever service opens an empty bucket first (`seed`). Every reader keeps its `ModelRegistry` and
its API (`find`, `get`, `names`, `default_model`): `LiveModels` swaps the registry's `models` list whenever
an entry changes, so a model added at run time is routable everywhere within one watch delivery, and a
removed one is a 404 at every gateway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from switchyard.libs.bus import Bus
from switchyard.libs.bus.kv import TypedKV
from switchyard.libs.models.registry import ModelRegistry
from switchyard.schemas import subjects
from switchyard.schemas.models import ModelCard

log = structlog.get_logger()


async def open_models(bus: Bus, bucket: str = subjects.MODELS_BUCKET) -> TypedKV[ModelCard]:
    return await bus.kv(bucket, ModelCard)


async def reset(kv: TypedKV[ModelCard], registry: ModelRegistry) -> None:
    """Make the bucket hold exactly the settings' entries (the stack supervisor, at start: entries added at run
    time by an earlier run have no process any more)."""
    pools = {card.pool for card in registry.models}
    for key in await kv.items():
        if key not in pools:
            await kv.delete(key)
    for card in registry.models:
        await kv.put(card.pool, card)


async def seed(kv: TypedKV[ModelCard], registry: ModelRegistry) -> None:
    """Write the settings' entries into an empty bucket; a bucket that holds entries is the registry as it is."""
    if await kv.items():
        return
    for card in registry.models:
        await kv.create(card.pool, card)


def with_entry(models: list[ModelCard], pool: str, card: ModelCard | None) -> list[ModelCard]:
    """`models` with pool `pool`'s entry replaced by `card` (in place), added (at the end) or removed (None)."""
    out: list[ModelCard] = []
    placed = False
    for c in models:
        if c.pool != pool:
            out.append(c)
        elif card is not None and not placed:
            out.append(card)
            placed = True
    if card is not None and not placed:
        out.append(card)
    return out


class LiveModels:
    """Keeps `registry.models` equal to the bucket's entries. Readers hold `registry` as before: each change
    replaces the list, so an iteration in progress sees one whole version of it."""

    def __init__(self, registry: ModelRegistry, kv: TypedKV[ModelCard]):
        self.registry = registry
        self.kv = kv
        self._changed = asyncio.Condition()

    @classmethod
    async def follow(
        cls, bus: Bus, registry: ModelRegistry, *, seed_empty: bool = True, bucket: str = subjects.MODELS_BUCKET
    ) -> LiveModels:
        """Read the bucket (seeding it from `registry` when empty), then watch it."""
        kv = await open_models(bus, bucket)
        if seed_empty:
            await seed(kv, registry)
        live = cls(registry, kv)
        await live.load()
        await kv.watch(live.changed)
        return live

    async def load(self) -> None:
        """Take the bucket's entries as they are now (an empty bucket leaves the settings' entries)."""
        entries = await self.kv.items()
        if entries:
            self.registry.models = [self._own(entries[k]) for k in sorted(entries, key=self._order)]
        async with self._changed:
            self._changed.notify_all()

    def _own(self, card: ModelCard) -> ModelCard:
        """`card` with this process's SWITCHYARD_MODEL_FALLBACKS over its own `fallback`: an operator names a
        fallback for one service (a router restarted with it) without rewriting the shared entry."""
        fallback = self.registry.model_fallbacks.get(card.name)
        return card if fallback is None else card.model_copy(update={"fallback": fallback})

    def _order(self, pool: str) -> tuple[int, str]:
        """The settings' order first (the default model leads `GET /v1/models`), added models after, by pool."""
        known = [c.pool for c in self.registry.models]
        return (known.index(pool), "") if pool in known else (len(known), pool)

    async def changed(self, pool: str, card: ModelCard | None) -> None:
        if card is not None and card.pool != pool:
            log.warning("model entry under another pool's key ignored", key=pool, pool=card.pool)
            return
        self.registry.models = with_entry(self.registry.models, pool, None if card is None else self._own(card))
        log.info("model registry changed", pool=pool, model=card.name if card else None, removed=card is None)
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, done: Callable[[ModelRegistry], bool], timeout_s: float) -> bool:
        """Until `done(registry)` holds (True), or `timeout_s` passes (False)."""
        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(lambda: done(self.registry)), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        await self.kv.close()
