"""What an operator set on a key, enforced: allowed models (403), token budgets per day and month (429),
and key changes heard from every gateway (`keys.changed`, switchyard/schemas/keys.py).

Expiry is checked with the key itself (auth.py). The model check takes the model name the request will
run (after any alias resolution), so whatever maps names to models can call `check_model` as it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from switchyard.libs.bus import Bus
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.limits.budget import BudgetBusy, BudgetRefusal, KeyBudgets
from switchyard.libs.models import ModelRegistry
from switchyard.libs.store.key_admin import Change, iso
from switchyard.libs.store.keys import ApiKey, KeyStore
from switchyard.schemas import ErrorCode
from switchyard.schemas.embeddings import EMBEDDING_MODEL, EMBEDDING_MODEL_ALIASES
from switchyard.schemas.keys import KeyChanged
from switchyard.schemas.subjects import KEYS_CHANGED
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.lazy import OpenedOnUse
from switchyard.services.gateway.settings import GatewaySettings

log = structlog.get_logger()


@dataclass(frozen=True)
class BudgetHold:
    """A budgeted key's admission: the tokens reserved for the request (None: none, debited after), and
    what settles its use once it ends."""

    reserved: int | None
    settle: Callable[[int], Awaitable[None]]


def resolve_served(registry: ModelRegistry, name: str) -> str | None:
    """The served model `name` (a name or an alias) means: a chat pool's or the embedding model's own name."""
    if name in EMBEDDING_MODEL_ALIASES:
        return EMBEDDING_MODEL
    card = registry.find(name)
    return None if card is None else card.name


def check_model(key: ApiKey, model: str, registry: ModelRegistry | None = None) -> None:
    """403 when the key names the models it may use and `model` (a served model's own name) is not one
    of them. With `registry`, a name the key holds is read as the model it names today (a key saved with
    an alias before aliases were resolved when saved)."""
    if key.allows_model(model):
        return
    if registry is not None and any(resolve_served(registry, m) == model for m in key.models or ()):
        return
    allowed = ", ".join(key.models or ())
    raise ApiError(ErrorCode.forbidden, f"this API key may not use model {model!r} (allowed: {allowed})")


def check_key_model(key: ApiKey, registry: ModelRegistry, model: str | None) -> None:
    """`check_model` for a request that names `model` (None: the default model), on a route that runs no
    model (token counting): the key's model list holds there as on every other route."""
    check_model(key, registry.get(model).name, registry)


def budget_error(refusal: BudgetRefusal, now: int) -> ApiError:
    resets = iso(refusal.resets_ms)
    return ApiError(
        ErrorCode.rate_limited,
        f"this API key's token budget per {refusal.budget} is spent: {refusal.spent} of {refusal.limit} tokens; "
        f"it resets at {resets}",
        retry_after=refusal.retry_after_s(now),
        details={"budget": refusal.budget, "spent": refusal.spent, "limit": refusal.limit, "resets_at": resets},
    )


class KeyPolicy:
    def __init__(self, bus: Bus, keys: KeyStore, settings: GatewaySettings):
        self.bus = bus
        self.keys = keys
        self.settings = settings
        self._listening = False
        self._listen_retry_at = 0.0
        self._budgets = OpenedOnUse(
            lambda: KeyBudgets.open(self.bus, self.settings.key_budgets_bucket), "key budgets unavailable"
        )
        self._lock = asyncio.Lock()

    async def listen(self) -> None:
        """Hear every gateway's key changes before this one trusts its cache (opened on first use, as the
        app may run without a lifespan). A gateway that has verified no key yet has nothing to drop."""
        if self._listening or time.monotonic() < self._listen_retry_at:
            return
        async with self._lock:
            if self._listening:
                return
            try:
                await self.bus.subscribe(KEYS_CHANGED, KeyChanged, self._changed, span=False)
                await self.bus.flush()
                self._listening = True
            except Exception as e:
                # Keys still verify; changes made elsewhere then reach this gateway within its cache's TTL.
                self._listen_retry_at = time.monotonic() + 30
                log.warning("key changes unheard", error=str(e) or type(e).__name__)

    async def _changed(self, msg: KeyChanged) -> None:
        self.keys.forget(msg.key_id)

    async def announce(self, key_id: str, change: Change) -> None:
        """Tell every gateway (this one too) that `key_id` changed; flushed, so it is on its way to them
        before the admin's response is."""
        self.keys.forget(key_id)
        try:
            await self.bus.publish(KEYS_CHANGED, KeyChanged(key_id=key_id, change=change, ts_ms=now_ms()))
            await self.bus.flush()
        except Exception as e:  # the change is stored: other gateways see it within their cache's TTL
            log.warning("key change not announced", key_id=key_id, error=str(e) or type(e).__name__)

    async def budgets(self) -> KeyBudgets | None:
        return await self._budgets.get()

    async def admit(self, key: ApiKey, model: str, window: int | None = None) -> BudgetHold | None:
        """Check the key's model list and budgets before a request runs (None when the key has no budget).

        With `window` (the most tokens the request could use: prompt and max_tokens), up to that much of
        what the key has left is reserved now, and the request must fit in what was reserved; settling
        gives back what it did not use. Without, it is admitted while anything is left and its use
        debited after."""
        check_model(key, model, self.settings.registry)
        if key.budget_day is None and key.budget_month is None:
            return None
        budgets = await self.budgets()
        if budgets is None:
            return None
        now = now_ms()
        try:
            if window is None:
                got: int | BudgetRefusal | None = await budgets.check(key.id, key.budget_day, key.budget_month, now)
            else:
                got = await budgets.reserve(key.id, window, key.budget_day, key.budget_month, now)
        except BudgetBusy as e:
            raise ApiError(ErrorCode.overloaded, f"this API key's budget is busy: {e}", retry_after=1) from e
        except Exception as e:  # as the limiter: a KV store away admits
            log.warning("key budget unavailable: admitting", error=str(e) or type(e).__name__)
            return None
        if isinstance(got, BudgetRefusal):
            raise budget_error(got, now)
        reserved = got

        async def settle(used: int) -> None:
            await budgets.debit(key.id, used - (reserved or 0), now_ms())

        return BudgetHold(reserved, settle)
