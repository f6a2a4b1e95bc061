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
from collections import OrderedDict
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
    def __init__(self, engine: AsyncEngine, verified_ttl_s: float = 0.0):
        self.engine = engine
        self._session = async_sessionmaker(engine, expire_on_commit=False)
        # Live keys verified in the last `verified_ttl_s` seconds, by hash: a request costs no database
        # round trip (at a thousand new streams a second the pool ran dry). A key revoked elsewhere (another
        # gateway, the CLI) is refused here within the TTL; one revoked here at once. Unknown keys are not
        # kept, so a key created elsewhere works at once.
        self.verified_ttl_s = verified_ttl_s
        self._verified: OrderedDict[str, tuple[float, ApiKey]] = OrderedDict()

    @classmethod
    async def open(cls, url: str, verified_ttl_s: float = 0.0) -> KeyStore:
        engine = make_engine(url)
        await create_all(engine, _Base.metadata)
        return cls(engine, verified_ttl_s)

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
        async with self._session() as s:
            row = (await s.execute(select(ApiKeyRow).where(ApiKeyRow.hash == digest))).scalar_one_or_none()
        if row is None or row.revoked is not None:
            self._verified.pop(digest, None)
            return None
        key = ApiKey.of(row)
        if self.verified_ttl_s > 0:
            self._verified[digest] = (time.monotonic() + self.verified_ttl_s, key)
            self._verified.move_to_end(digest)
            while len(self._verified) > 10_000:
                self._verified.popitem(last=False)
        return key

    async def list(self) -> list[ApiKey]:
        async with self._session() as s:
            rows = (await s.execute(select(ApiKeyRow).order_by(ApiKeyRow.created))).scalars().all()
        return [ApiKey.of(r) for r in rows]

    async def revoke(self, key_id: str) -> bool:
        self._verified.clear()  # this gateway refuses it from now on, not after the TTL
        async with self._session.begin() as s:
            res = await s.execute(
                update(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.revoked.is_(None)).values(revoked=_now_ms())
            )
        return bool(getattr(res, "rowcount", 0))
