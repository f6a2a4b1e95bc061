"""API keys: stored hashed, each bound to a tenant, a user and a rate-limit tier, and optionally to a
list of allowed models, token budgets per day and month, and an expiry (what an operator sets
over `/v1/admin/keys`; key_admin.py validates those values for the API and the CLI alike).

Keys are 256-bit random tokens, so a single SHA-256 is enough: a slow password hash (bcrypt, argon2)
defends low-entropy secrets against guessing, and nobody can enumerate a 2^256 space. A plain,
deterministic digest also lets a lookup go straight to a unique index instead of scanning every row.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, String, inspect, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from switchyard.libs.store.db import add_missing_columns, create_all, make_engine

KEY_PREFIX = "sy-"
TIERS = ("free", "pro")


class _Base(DeclarativeBase):
    pass


class ApiKeyRow(_Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # The first characters of the raw key, so an operator can tell keys apart in `keys list`.
    prefix: Mapped[str] = mapped_column(String(16))
    hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    user: Mapped[str] = mapped_column(String(128))
    tier: Mapped[str] = mapped_column(String(32))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    # BigInteger: epoch ms is past PostgreSQL's 32-bit INTEGER (SQLite's INTEGER is 64-bit anyway).
    created: Mapped[int] = mapped_column(BigInteger)  # epoch ms
    revoked: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # epoch ms
    # Added after the first release of this table: migrate() adds them to an older one.
    name: Mapped[str] = mapped_column(String(128), default="")
    models: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # None: every model
    budget_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # tokens per UTC day
    budget_month: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # tokens per UTC month
    expires: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # epoch ms
    rotated: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # epoch ms of the last rotation


@dataclass(frozen=True)
class ApiKey:
    id: str
    prefix: str
    tenant: str
    user: str
    tier: str
    admin: bool
    created: int
    revoked: int | None = None
    name: str = ""
    models: tuple[str, ...] | None = None
    budget_day: int | None = None
    budget_month: int | None = None
    expires: int | None = None
    rotated: int | None = None

    @classmethod
    def of(cls, row: ApiKeyRow) -> ApiKey:
        return cls(
            row.id,
            row.prefix,
            row.tenant,
            row.user,
            row.tier,
            bool(row.admin),
            row.created,
            row.revoked,
            row.name or "",
            None if row.models is None else tuple(row.models),
            row.budget_day,
            row.budget_month,
            row.expires,
            row.rotated,
        )

    def expired(self, now_ms: int) -> bool:
        return self.expires is not None and now_ms >= self.expires

    def allows_model(self, model: str) -> bool:
        return self.models is None or model in self.models


# What `KeyStore.update` may change.
POLICY_FIELDS = ("name", "tier", "models", "budget_day", "budget_month", "expires")


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_raw_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _now_ms() -> int:
    return int(time.time() * 1000)


class KeyStore:
    def __init__(self, engine: AsyncEngine, verified_ttl_s: float = 0.0):
        self.engine = engine
        self._session = async_sessionmaker(engine, expire_on_commit=False)
        # Live keys verified in the last `verified_ttl_s` seconds, by hash: a request costs no database
        # round trip (at a thousand new streams a second the pool ran dry). A key revoked elsewhere (another
        # gateway, the CLI) is refused here within the TTL; one revoked here at once. Unknown keys are not
        # kept, so a key created elsewhere works at once.
        self.verified_ttl_s = verified_ttl_s
        self._verified: OrderedDict[str, tuple[float, ApiKey]] = OrderedDict()
        # Bumped by every `forget`: a read that began before a change must not cache what it read.
        self._generation = 0

    @classmethod
    async def open(cls, url: str, verified_ttl_s: float = 0.0) -> KeyStore:
        store = cls(make_engine(url), verified_ttl_s)
        await store.init()
        return store

    async def init(self) -> None:
        await create_all(self.engine, _Base.metadata)
        async with self.engine.begin() as conn:
            await conn.run_sync(_migrate)

    async def close(self) -> None:
        await self.engine.dispose()

    async def create(
        self, tenant: str, tier: str, user: str = "", admin: bool = False, **policy: Any
    ) -> tuple[ApiKey, str]:
        """A new key; the raw key is returned once and never stored. `policy`: any of POLICY_FIELDS."""
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}")
        _check_policy(policy)
        raw = new_raw_key()
        row = ApiKeyRow(
            id="key_" + uuid.uuid4().hex[:16],
            prefix=raw[:10],
            hash=hash_key(raw),
            tenant=tenant,
            user=user or tenant,
            tier=tier,
            admin=admin,
            created=_now_ms(),
            name=policy.pop("name", "") or "",
            **policy,
        )
        async with self._session.begin() as s:
            s.add(row)
        return ApiKey.of(row), raw

    async def upsert(self, raw: str, tenant: str, user: str, tier: str, admin: bool = False) -> ApiKey:
        """Install a key whose raw value comes from configuration (the dev and admin keys).

        Its id derives from the hash, so every replica and every restart agree on it; a key that was
        revoked stays revoked.
        """
        digest = hash_key(raw)
        self._verified.pop(digest, None)
        async with self._session.begin() as s:
            row = (await s.execute(select(ApiKeyRow).where(ApiKeyRow.hash == digest))).scalar_one_or_none()
            if row is None:
                row = ApiKeyRow(
                    id="key_" + digest[:16],
                    prefix=raw[:10],
                    hash=digest,
                    tenant=tenant,
                    user=user,
                    tier=tier,
                    admin=admin,
                    created=_now_ms(),
                )
                s.add(row)
            else:
                row.tenant, row.user, row.tier, row.admin = tenant, user, tier, admin
        return ApiKey.of(row)

    async def verify(self, raw: str) -> ApiKey | None:
        """The live key for `raw`, or None when it is unknown or revoked."""
        digest = hash_key(raw)
        kept = self._verified.get(digest)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        generation = self._generation
        async with self._session() as s:
            row = (await s.execute(select(ApiKeyRow).where(ApiKeyRow.hash == digest))).scalar_one_or_none()
        if row is None or row.revoked is not None:
            self._verified.pop(digest, None)
            return None
        key = ApiKey.of(row)
        if self.verified_ttl_s > 0 and generation == self._generation:
            self._verified[digest] = (time.monotonic() + self.verified_ttl_s, key)
            self._verified.move_to_end(digest)
            while len(self._verified) > 10_000:
                self._verified.popitem(last=False)
        return key

    async def list(self, tenant: str | None = None) -> list[ApiKey]:
        q = select(ApiKeyRow).order_by(ApiKeyRow.created)
        if tenant is not None:
            q = q.where(ApiKeyRow.tenant == tenant)
        async with self._session() as s:
            rows = (await s.execute(q)).scalars().all()
        return [ApiKey.of(r) for r in rows]

    async def get(self, key_id: str) -> ApiKey | None:
        async with self._session() as s:
            row = await s.get(ApiKeyRow, key_id)
        return None if row is None else ApiKey.of(row)

    def forget(self, key_id: str) -> None:
        """Drop this key from the verified cache: it was changed (here, or elsewhere and announced)."""
        self._generation += 1
        for digest in [d for d, (_, k) in self._verified.items() if k.id == key_id]:
            self._verified.pop(digest, None)

    async def update(self, key_id: str, **policy: Any) -> ApiKey | None:
        """Change any of POLICY_FIELDS of a live key; None when there is no live key `key_id`."""
        _check_policy(policy)
        if "tier" in policy and policy["tier"] not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}")
        self.forget(key_id)
        async with self._session.begin() as s:
            row = await s.get(ApiKeyRow, key_id, with_for_update=True)
            if row is None or row.revoked is not None:
                return None
            for name, value in policy.items():
                setattr(row, name, value)
        return ApiKey.of(row)

    async def rotate(self, key_id: str) -> tuple[ApiKey, str] | None:
        """A new secret for a live key (same id, tenant, policy and usage history); the old secret no longer
        verifies. None when there is no live key `key_id`."""
        raw = new_raw_key()
        self.forget(key_id)
        async with self._session.begin() as s:
            row = await s.get(ApiKeyRow, key_id, with_for_update=True)
            if row is None or row.revoked is not None:
                return None
            if row.id == "key_" + row.hash[:16]:
                # Its id derives from the configured secret's hash: the setting is what rotates it.
                raise ValueError("a configured key (SWITCHYARD_API_KEY, SWITCHYARD_ADMIN_KEY) rotates by changing it")
            row.hash, row.prefix, row.rotated = hash_key(raw), raw[:10], _now_ms()
        return ApiKey.of(row), raw

    async def revoke(self, key_id: str) -> bool:
        self.forget(key_id)  # this gateway refuses it from now on, not after the TTL
        async with self._session.begin() as s:
            res = await s.execute(
                update(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.revoked.is_(None)).values(revoked=_now_ms())
            )
        return bool(getattr(res, "rowcount", 0))


def _check_policy(policy: dict[str, Any]) -> None:
    unknown = set(policy) - set(POLICY_FIELDS)
    if unknown:
        raise ValueError(f"unknown key fields {sorted(unknown)}")
    if policy.get("models") is not None:
        policy["models"] = list(policy["models"])


def _migrate(conn: Any) -> None:
    """An api_keys table from an older version: add the newer columns, and on PostgreSQL widen the epoch-ms
    columns an older version made 32-bit INTEGER (any insert there failed, so no data is at stake)."""
    table = ApiKeyRow.__table__
    add_missing_columns(conn, table, {"name": "''"})  # type: ignore[arg-type]
    if conn.dialect.name != "postgresql":
        return
    schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
    name = f'"{schema}".api_keys' if schema else "api_keys"
    for col in inspect(conn).get_columns("api_keys", schema=schema):
        if col["name"] in ("created", "revoked") and type(col["type"]).__name__ == "INTEGER":
            conn.execute(text(f"ALTER TABLE {name} ALTER COLUMN {col['name']} TYPE BIGINT"))
