"""API keys: stored hashed, each bound to a tenant, a user and a rate-limit tier.

Keys are 256-bit random tokens, so a single SHA-256 is enough: a slow password hash (bcrypt, argon2)
defends low-entropy secrets against guessing, and nobody can enumerate a 2^256 space. A plain,
deterministic digest also lets a lookup go straight to a unique index instead of scanning every row.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Boolean, Integer, String, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from libs.store.db import create_all, make_engine

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
    created: Mapped[int] = mapped_column(Integer)  # epoch ms
    revoked: Mapped[int | None] = mapped_column(Integer, nullable=True)  # epoch ms


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

    @classmethod
    def of(cls, row: ApiKeyRow) -> ApiKey:
        return cls(row.id, row.prefix, row.tenant, row.user, row.tier, bool(row.admin), row.created, row.revoked)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_raw_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _now_ms() -> int:
    return int(time.time() * 1000)


class KeyStore:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self._session = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str) -> KeyStore:
        engine = make_engine(url)
        await create_all(engine, _Base.metadata)
        return cls(engine)

    async def close(self) -> None:
        await self.engine.dispose()

    async def create(self, tenant: str, tier: str, user: str = "", admin: bool = False) -> tuple[ApiKey, str]:
        """A new key; the raw key is returned once and never stored."""
        if tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}")
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
        async with self._session() as s:
            row = (await s.execute(select(ApiKeyRow).where(ApiKeyRow.hash == hash_key(raw)))).scalar_one_or_none()
        if row is None or row.revoked is not None:
            return None
        return ApiKey.of(row)

    async def list(self) -> list[ApiKey]:
        async with self._session() as s:
            rows = (await s.execute(select(ApiKeyRow).order_by(ApiKeyRow.created))).scalars().all()
        return [ApiKey.of(r) for r in rows]

    async def revoke(self, key_id: str) -> bool:
        async with self._session.begin() as s:
            res = await s.execute(
                update(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.revoked.is_(None)).values(revoked=_now_ms())
            )
        return bool(getattr(res, "rowcount", 0))
