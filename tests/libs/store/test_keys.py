from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from switchyard.cli.keys import main as keys_main
from switchyard.libs.store.keys import KeyStore, hash_key


async def test_keys_are_stored_hashed_and_revocable(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    store = await KeyStore.open(f"sqlite+aiosqlite:///{db}")
    key, raw = await store.create("acme", "free", user="ann")
    assert raw.startswith("sy-") and len(raw) > 40
    assert (key.tenant, key.user, key.tier, key.admin) == ("acme", "ann", "free", False)
    assert await store.verify(raw) == key
    assert await store.verify(raw + "x") is None

    # The raw key appears nowhere in the database file; only its SHA-256 does.
    await store.close()
    dump = "\n".join(sqlite3.connect(db).iterdump())
    assert raw not in dump and hash_key(raw) in dump
    assert raw[:10] in dump  # the display prefix, too short to use

    store = await KeyStore.open(f"sqlite+aiosqlite:///{db}")
    assert await store.revoke(key.id)
    assert not await store.revoke(key.id)
    assert await store.verify(raw) is None
    assert [k.revoked is not None for k in await store.list()] == [True]
    await store.close()


async def test_configured_keys_upsert_with_stable_ids(tmp_path: Path) -> None:
    store = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
    a = await store.upsert("dev-key", tenant="default", user="dev", tier="pro")
    b = await store.upsert("dev-key", tenant="default", user="dev", tier="pro", admin=True)
    assert a.id == b.id and b.admin
    assert len(await store.list()) == 1
    await store.revoke(a.id)
    await store.upsert("dev-key", tenant="default", user="dev", tier="pro")
    assert await store.verify("dev-key") is None  # a restart does not revive a revoked key
    with pytest.raises(ValueError):
        await store.create("t", "platinum")
    await store.close()


def test_cli_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"]
    assert keys_main([*url, "create", "--tenant", "acme", "--tier", "pro", "--user", "ann", "--admin"]) == 0
    raw = capsys.readouterr().out.strip()
    assert raw.startswith("sy-")
    assert keys_main([*url, "list"]) == 0
    out = capsys.readouterr().out
    assert "acme" in out and "ann" in out and raw not in out
    key_id = out.splitlines()[1].split()[0]
    assert keys_main([*url, "revoke", key_id]) == 0
    assert keys_main([*url, "revoke", key_id]) == 1


async def test_verified_keys_are_kept_for_their_ttl_and_a_revoke_here_ends_that(tmp_path: Path) -> None:
    store = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}", verified_ttl_s=60.0)
    other = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")  # another gateway, the CLI
    try:
        key, raw = await store.create("acme", "free")
        assert await store.verify(raw) == key
        await other.revoke(key.id)
        assert await store.verify(raw) == key  # revoked elsewhere: refused here once the TTL has passed
        await store.revoke(key.id)
        assert await store.verify(raw) is None  # revoked here: at once
        _, fresh = await other.create("acme", "free")
        assert await store.verify(fresh) is not None  # unknown keys are never kept: a new one works at once
    finally:
        await store.close()
        await other.close()
