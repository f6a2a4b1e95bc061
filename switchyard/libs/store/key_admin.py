"""Managing API keys: the one implementation behind `/v1/admin/keys` (the gateway) and `keys` (the CLI).

Input is validated here, once, as pydantic models: a tier the gateway knows, bounded names, at most
`MAX_MODELS` model names, positive budgets, an expiry in the future. `KeyView` is what either shows of a
key: never its secret (only `prefix`); the secret appears once, in what `create` and `rotate` return.
`on_change(key_id, change)` runs after a change is stored, so the gateway can tell the other gateways
(their caches of verified keys must drop the key at once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator

from switchyard.libs.store.keys import TIERS, ApiKey, KeyStore

MAX_MODELS = 100
Change = Literal["created", "updated", "rotated", "revoked"]
OnChange = Callable[[str, Change], Awaitable[None]] | None
# A model name or alias -> the served model's own name; None for a name no model has.
ResolveModel = Callable[[str], str | None]
Tier = Literal["free", "pro"]
assert set(TIERS) == {"free", "pro"}, "Tier must list the store's tiers"

ModelName = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
Budget = Annotated[int, Field(ge=1, le=10**15)] | None


def parse_time_ms(raw: Any) -> int | None:
    """Epoch milliseconds (an integer or digits), or ISO 8601 (UTC when it names no zone); None stays None."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        raise ValueError("a time is epoch milliseconds or ISO 8601")
    if isinstance(raw, int):
        return raw
    if not isinstance(raw, str) or len(raw) > 64:
        raise ValueError("a time is epoch milliseconds or ISO 8601")
    if raw.isdigit():
        return int(raw)
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"bad time {raw!r}: use epoch ms or ISO 8601") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# Up to the end of year 9999, which is what ISO 8601 can write back.
TimeMs = Annotated[Annotated[int, Field(ge=0, le=253402300799999)] | None, BeforeValidator(parse_time_ms)]


def _models(v: list[str] | None) -> list[str] | None:
    # An empty list means what leaving it out means: every model (a key allowed none would be useless).
    return sorted(set(v)) or None if v is not None else None


class KeyPolicy(BaseModel):
    """What an operator may set on a key and change later (every field of `KeyUpdate`)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(max_length=128)] = ""
    tier: Tier = "free"
    models: Annotated[list[ModelName] | None, Field(max_length=MAX_MODELS)] = None
    budget_tokens_per_day: Budget = None
    budget_tokens_per_month: Budget = None
    expires_at: TimeMs = None

    _norm_models = field_validator("models")(_models)

    def store_fields(self, only_set: bool = False) -> dict[str, Any]:
        names = {
            "name": "name",
            "tier": "tier",
            "models": "models",
            "budget_tokens_per_day": "budget_day",
            "budget_tokens_per_month": "budget_month",
            "expires_at": "expires",
        }
        given = self.model_fields_set if only_set else set(names)
        return {names[k]: getattr(self, k) for k in names if k in given}


class NewKey(KeyPolicy):
    """`POST /v1/admin/keys`."""

    tenant: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
    user: Annotated[str, StringConstraints(max_length=128, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""
    admin: bool = False


class KeyUpdate(KeyPolicy):
    """`PATCH /v1/admin/keys/{id}`: only the fields sent change; `null` clears a budget, the model list
    (every model) or the expiry (never)."""


class KeyView(BaseModel):
    id: str
    prefix: str
    tenant: str
    user: str
    name: str
    tier: str
    admin: bool
    models: list[str] | None
    budget_tokens_per_day: int | None
    budget_tokens_per_month: int | None
    expires_at: str | None
    created_at: str | None
    rotated_at: str | None
    revoked_at: str | None
    state: Literal["active", "revoked", "expired"]

    @classmethod
    def of(cls, key: ApiKey, now_ms: int) -> KeyView:
        state: Literal["active", "revoked", "expired"] = (
            "revoked" if key.revoked is not None else "expired" if key.expired(now_ms) else "active"
        )
        return cls(
            id=key.id,
            prefix=key.prefix,
            tenant=key.tenant,
            user=key.user,
            name=key.name,
            tier=key.tier,
            admin=key.admin,
            models=None if key.models is None else list(key.models),
            budget_tokens_per_day=key.budget_day,
            budget_tokens_per_month=key.budget_month,
            expires_at=iso(key.expires),
            created_at=iso(key.created),
            rotated_at=iso(key.rotated),
            revoked_at=iso(key.revoked),
            state=state,
        )


class KeySecret(KeyView):
    """A key as created or rotated: `key` is the secret, shown this once."""

    key: str


def canonical_models(models: list[str] | None, resolve: ResolveModel | None) -> list[str] | None:
    """A key's model list by the served models' own names (an alias is stored as the model it names, so
    the key means the same on every route); ValueError naming every name no model has."""
    if models is None or resolve is None:
        return models
    named = {m: resolve(m) for m in models}
    unknown = [m for m, name in named.items() if name is None]
    if unknown:
        raise ValueError(f"unknown model {', '.join(map(repr, unknown))}: GET /v1/models lists the served models")
    return sorted({name for name in named.values() if name is not None})


def _not_past(expires: int | None, now_ms: int) -> None:
    if expires is not None and expires <= now_ms:
        raise ValueError("expires_at is in the past")


async def create_key(
    store: KeyStore, spec: NewKey, now_ms: int, on_change: OnChange = None, resolve: ResolveModel | None = None
) -> KeySecret:
    """`resolve`: how model names and aliases map to served models (None: names are stored as given)."""
    _not_past(spec.expires_at, now_ms)
    policy = spec.store_fields()
    policy["models"] = canonical_models(policy["models"], resolve)
    del policy["tier"]
    key, raw = await store.create(spec.tenant, spec.tier, user=spec.user, admin=spec.admin, **policy)
    if on_change is not None:
        await on_change(key.id, "created")
    return KeySecret(**KeyView.of(key, now_ms).model_dump(), key=raw)


async def update_key(
    store: KeyStore,
    key_id: str,
    change: KeyUpdate,
    now_ms: int,
    on_change: OnChange = None,
    resolve: ResolveModel | None = None,
) -> KeyView | None:
    """None when there is no live key `key_id`. `resolve` as for `create_key`."""
    fields = change.store_fields(only_set=True)
    _not_past(fields.get("expires"), now_ms)
    if "models" in fields:
        fields["models"] = canonical_models(fields["models"], resolve)
    key = await store.update(key_id, **fields)
    if key is not None and on_change is not None:
        await on_change(key_id, "updated")
    return None if key is None else KeyView.of(key, now_ms)


async def rotate_key(store: KeyStore, key_id: str, now_ms: int, on_change: OnChange = None) -> KeySecret | None:
    got = await store.rotate(key_id)
    if got is None:
        return None
    if on_change is not None:
        await on_change(key_id, "rotated")
    return KeySecret(**KeyView.of(got[0], now_ms).model_dump(), key=got[1])


async def revoke_key(store: KeyStore, key_id: str, now_ms: int, on_change: OnChange = None) -> KeyView | None:
    """The revoked key; None when there is no key `key_id` (revoking a revoked key changes nothing)."""
    await store.revoke(key_id)
    key = await store.get(key_id)
    if key is None:
        return None
    if on_change is not None:
        await on_change(key_id, "revoked")
    return KeyView.of(key, now_ms)
