"""Keys an operator manages (issue 30): the policy fields, update, rotate, revoke, the older table's
migration, and usage per key from the request records; on SQLite, and on PostgreSQL when configured."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import Boolean, Column, Integer, MetaData, String, Table, insert, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from switchyard.libs.store.key_admin import KeyUpdate, NewKey, create_key, revoke_key, rotate_key, update_key
from switchyard.libs.store.keys import KeyStore
from switchyard.libs.store.records import RecordStore, requests
from switchyard.schemas import GatewayPart, SafetyOutPart, StageRecord, Usage
from switchyard.schemas.keys import KeyUsageQuery

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z: past 2^31, as every epoch-ms is
DAY = 24 * 3600 * 1000


async def test_create_update_rotate_revoke(engine: AsyncEngine) -> None:
    store = KeyStore(engine, verified_ttl_s=60.0)
    await store.init()
    seen: list[tuple[str, str]] = []

    async def on_change(key_id: str, change: str) -> None:
        seen.append((key_id, change))

    spec = NewKey(
        tenant="acme",
        tier="pro",
        name="ci bot",
        models=["b-model", "a-model", "a-model"],
        budget_tokens_per_day=1000,
        expires_at="2030-01-01T00:00:00Z",
    )
    made = await create_key(store, spec, NOW, on_change)
    assert made.key.startswith("sy-") and made.prefix == made.key[:10]
    assert (made.tenant, made.tier, made.name, made.state) == ("acme", "pro", "ci bot", "active")
    assert made.models == ["a-model", "b-model"]
    assert (made.budget_tokens_per_day, made.budget_tokens_per_month) == (1000, None)
    assert made.expires_at == "2030-01-01T00:00:00Z"
    key = await store.verify(made.key)
    assert key is not None and key.allows_model("a-model") and not key.allows_model("c-model")
    assert key.expires is not None and not key.expired(NOW) and key.expired(key.expires)

    # Only what is sent changes; null clears; an empty model list is every model.
    changed = await update_key(
        store, made.id, KeyUpdate.model_validate({"models": [], "budget_tokens_per_month": 5}), NOW
    )
    assert changed is not None
    assert (changed.models, changed.budget_tokens_per_day, changed.budget_tokens_per_month) == (None, 1000, 5)
    assert changed.name == "ci bot" and changed.tier == "pro"
    cleared = await update_key(store, made.id, KeyUpdate.model_validate({"expires_at": None}), NOW)
    assert cleared is not None and cleared.expires_at is None
    key = await store.verify(made.key)  # updated here: the cached key is not served
    assert key is not None and key.models is None and key.budget_month == 5

    rotated = await rotate_key(store, made.id, NOW, on_change)
    assert rotated is not None and rotated.id == made.id and rotated.key != made.key
    assert rotated.rotated_at is not None
    assert await store.verify(made.key) is None
    assert (await store.verify(rotated.key)) is not None

    revoked = await revoke_key(store, made.id, NOW, on_change)
    assert revoked is not None and revoked.state == "revoked" and revoked.revoked_at
    assert await store.verify(rotated.key) is None
    assert await rotate_key(store, made.id, NOW) is None  # a revoked key stays revoked
    assert await update_key(store, made.id, KeyUpdate(name="x"), NOW) is None
    assert await revoke_key(store, "key_nope", NOW) is None
    assert seen == [(made.id, "created"), (made.id, "rotated"), (made.id, "revoked")]

    other = await create_key(store, NewKey(tenant="globex"), NOW)
    assert [k.id for k in await store.list("globex")] == [other.id]
    assert len(await store.list()) == 2
    await store.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"tenant": ""},
        {"tenant": "a", "tier": "platinum"},
        {"tenant": "a", "budget_tokens_per_day": 0},
        {"tenant": "a", "budget_tokens_per_month": -5},
        {"tenant": "a", "models": ["x"] * 101},
        {"tenant": "a", "models": [""]},
        {"tenant": "a", "expires_at": "yesterday"},
        {"tenant": "a", "expires_at": True},
        {"tenant": "a", "surprise": 1},
        {"tenant": "a\n"},
        {"tenant": "a", "name": "n" * 129},
    ],
)
def test_bad_specs_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        NewKey.model_validate(bad)


async def test_expiry_in_the_past_and_configured_keys_refuse(engine: AsyncEngine) -> None:
    store = KeyStore(engine)
    await store.init()
    with pytest.raises(ValueError, match="past"):
        await create_key(store, NewKey(tenant="a", expires_at=NOW - 1), NOW)
    configured = await store.upsert("sy-configured-admin", tenant="default", user="admin", tier="pro", admin=True)
    with pytest.raises(ValueError, match="configured"):
        await rotate_key(store, configured.id, NOW)
    await store.close()


async def test_an_older_keys_table_is_migrated(engine: AsyncEngine) -> None:
    # The table as the version before issue 30 made it (32-bit epoch columns, no policy columns); built
    # with SQLAlchemy so that it lands in the test's private schema.
    old_md = MetaData()
    old_table = Table(
        "api_keys",
        old_md,
        Column("id", String(32), primary_key=True),
        Column("prefix", String(16)),
        Column("hash", String(64), unique=True),
        Column("tenant", String(128)),
        Column("user", String(128)),
        Column("tier", String(32)),
        Column("admin", Boolean),
        Column("created", Integer),
        Column("revoked", Integer),
    )
    async with engine.begin() as conn:
        await conn.run_sync(old_md.create_all)
        await conn.execute(
            insert(old_table).values(
                id="key_old", prefix="sy-old", hash="h", tenant="acme", user="ann", tier="free", admin=False, created=1
            )
        )
    store = KeyStore(engine)
    await store.init()
    old = await store.get("key_old")
    assert old is not None and old.name == "" and old.models is None and old.expires is None
    made = await create_key(store, NewKey(tenant="acme", budget_tokens_per_month=10), NOW)  # epoch ms fits
    assert (await store.get(made.id)) is not None
    await store.init()  # idempotent
    await store.close()


def _records(rid: str, key_id: str | None, t: int, model: str, prompt: int, completion: int) -> list[StageRecord]:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
    return [
        StageRecord(
            rid=rid, stage="gateway", tenant="acme", started_ms=t, duration_ms=5, part=GatewayPart(key_id=key_id)
        ),
        StageRecord(
            rid=rid,
            stage="safety_out",
            tenant="acme",
            started_ms=t + 1,
            duration_ms=3,
            part=SafetyOutPart(status="complete", usage=usage, model=model),
        ),
    ]


async def test_usage_per_key_by_model_and_day(engine: AsyncEngine) -> None:
    store = RecordStore(engine)
    await store.init()
    await store.apply(
        _records("r1", "key_a", NOW, "m1", 10, 2)
        + _records("r2", "key_a", NOW + 1000, "m2", 20, 4)
        + _records("r3", "key_a", NOW + DAY, "m1", 5, 1)
        + _records("r4", "key_b", NOW, "m1", 100, 100)
        + _records("r5", None, NOW, "m1", 100, 100)
        + _records("r6", "key_a", NOW - 40 * DAY, "m1", 100, 100)
    )
    got = await store.key_usage(KeyUsageQuery(key_id="key_a", since_ms=NOW - 30 * DAY, until_ms=NOW + 2 * DAY))
    assert (got.total.requests, got.total.prompt_tokens, got.total.completion_tokens) == (3, 35, 7)
    assert got.total.total_tokens == 42
    assert {m.model: (m.requests, m.total_tokens) for m in got.by_model} == {"m1": (2, 18), "m2": (1, 24)}
    assert [(d.day, d.requests, d.prompt_tokens) for d in got.by_day] == [("2027-01-15", 2, 30), ("2027-01-16", 1, 5)]
    none = await store.key_usage(KeyUsageQuery(key_id="key_c", since_ms=0, until_ms=NOW * 2))
    assert none.total.requests == 0 and none.by_model == [] and none.by_day == []


async def test_an_older_requests_table_gains_the_key_column_and_index(engine: AsyncEngine) -> None:
    # The requests table as it was before issue 30: every column but key_id, and not its index.
    old_md = MetaData()
    Table(
        "requests",
        old_md,
        *[
            Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
            for c in requests.c
            if c.name != "key_id"
        ],
    )
    async with engine.begin() as conn:
        await conn.run_sync(old_md.create_all)
    store = RecordStore(engine)
    await store.init()
    await store.init()  # idempotent
    async with engine.connect() as conn:
        names = await conn.run_sync(
            lambda c: [i["name"] for i in _inspector(c).get_indexes("requests", schema=_schema(c))]
        )
    assert "ix_requests_key_created" in names
    await store.apply(_records("r1", "key_a", NOW, "m1", 10, 2))
    got = await store.key_usage(KeyUsageQuery(key_id="key_a", since_ms=0, until_ms=NOW + DAY))
    assert got.total.total_tokens == 12


def _inspector(sync_conn: Any) -> Any:
    return inspect(sync_conn)


def _schema(sync_conn: Any) -> str | None:
    schema: str | None = (sync_conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    return schema


async def test_model_names_are_stored_as_the_models_they_name(engine: AsyncEngine) -> None:
    store = KeyStore(engine, verified_ttl_s=60.0)
    await store.init()
    served = {"small": "Small-1", "Small-1": "Small-1", "big": "Big-2"}
    made = await create_key(store, NewKey(tenant="m", models=["small", "Small-1", "big"]), NOW, None, served.get)
    assert made.models == ["Big-2", "Small-1"]
    with pytest.raises(ValueError, match="'nope'"):
        await create_key(store, NewKey(tenant="m", models=["small", "nope"]), NOW, None, served.get)
    with pytest.raises(ValueError, match="'gone'"):
        await update_key(store, made.id, KeyUpdate.model_validate({"models": ["gone"]}), NOW, None, served.get)
    assert [k.models for k in await store.list("m")] == [("Big-2", "Small-1")]
    cleared = await update_key(store, made.id, KeyUpdate.model_validate({"models": None}), NOW, None, served.get)
    assert cleared is not None and cleared.models is None
