"""`keys` runs the same key management as `/v1/admin/keys`: policy on create, update, rotate, and the
revocation announced on the bus (what every gateway's cache listens to)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from switchyard.cli import keys as keys_cli
from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.store.keys import KeyStore
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas.keys import KeyChanged
from switchyard.schemas.subjects import KEYS_CHANGED
from switchyard.services.gateway.settings import GatewaySettings


async def run(*argv: str) -> int:
    args = keys_cli._parser().parse_args(list(argv))
    return await keys_cli._run(args, keys_cli.settings_for(args, GatewaySettings()))


async def test_cli_policy_rotate_and_announced_revoke(
    tmp_path: Path, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'k.db'}", "--nats-url", nats_server.url]
    bus = await Bus.connect(nats_server.url, "test", uuid.uuid4().hex[:6], setup_tracing("test"))
    heard: asyncio.Queue[KeyChanged] = asyncio.Queue()

    async def on_change(msg: KeyChanged) -> None:
        await heard.put(msg)

    await bus.subscribe(KEYS_CHANGED, KeyChanged, on_change)
    await bus.flush()
    try:
        args = ["--tenant", "acme", "--tier", "free", "--name", "bot", "--models", "smollm2,gemma3-270m"]
        args += ["--budget-day", "500"]
        assert await run(*db, "create", *args, "--expires", "2031-01-01") == 0
        raw = capsys.readouterr().out.strip()
        store = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
        key = await store.verify(raw)
        # Aliases are stored as the models they name.
        assert key is not None and key.models == ("SmolLM2-135M-Instruct", "gemma-3-270m")
        assert key.budget_day == 500 and key.name == "bot"
        # A name no model has is refused, and nothing is stored.
        assert await run(*db, "create", "--tenant", "acme", "--tier", "free", "--models", "no-such-model") == 2
        assert "no-such-model" in capsys.readouterr().err
        assert len(await store.list("acme")) == 1

        assert await run(*db, "update", key.id, "--tier", "pro", "--clear", "models", "--budget-month", "9000") == 0
        assert (await heard.get()).change == "updated"
        assert "pro" in capsys.readouterr().out
        assert await run(*db, "show", key.id) == 0
        shown = json.loads(capsys.readouterr().out)
        assert (shown["tier"], shown["models"], shown["budget_tokens_per_month"]) == ("pro", None, 9000)
        assert shown["expires_at"] == "2031-01-01T00:00:00Z" and "key" not in shown

        assert await run(*db, "rotate", key.id) == 0
        new = capsys.readouterr().out.strip()
        rotated = await heard.get()
        assert new != raw and (rotated.key_id, rotated.change) == (key.id, "rotated")
        assert await store.verify(raw) is None and await store.verify(new) is not None

        assert await run(*db, "revoke", key.id) == 0
        assert (await heard.get()).change == "revoked"
        assert await run(*db, "revoke", key.id) == 1
        assert await run(*db, "list", "--tenant", "acme") == 0
        out = capsys.readouterr().out
        assert "revoked" in out and raw not in out and new not in out
        assert await run(*db, "create", "--tenant", "a", "--tier", "free", "--budget-day", "0") == 2  # refused
        await store.close()
    finally:
        await bus.close()


async def test_cli_edits_the_store_the_gateways_settings_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No flags: the store is where the gateway's own settings put it (its data dir), so a key the command
    makes is one the gateway reads."""
    settings = GatewaySettings(data_dir=str(tmp_path))
    args = keys_cli._parser().parse_args(["create", "--tenant", "acme", "--tier", "free"])
    assert await keys_cli._run(args, keys_cli.settings_for(args, settings)) == 0
    raw = capsys.readouterr().out.strip()
    store = await KeyStore.open(settings.db_url())
    try:
        assert (tmp_path / "gateway.db").exists() and await store.verify(raw) is not None
    finally:
        await store.close()
    flagged = keys_cli._parser().parse_args(["--database-url", "sqlite+aiosqlite:///elsewhere.db", "list"])
    assert keys_cli.settings_for(flagged, settings).db_url() == "sqlite+aiosqlite:///elsewhere.db"
