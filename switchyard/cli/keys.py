"""`keys create | list | show | update | rotate | revoke`: the same key management as `/v1/admin/keys`
(switchyard/libs/store/key_admin.py does the work for both).

Uses the gateway's settings (`SWITCHYARD_GATEWAY_DATABASE_URL`, `SWITCHYARD_DATA_DIR`, `NATS_URL`), so it
edits the same store the gateway reads. A raw key is printed once (create, rotate); only its hash is
stored. A change is announced on the bus when it is reachable, so every gateway drops the key from its
cache at once; when it is not, gateways refuse a revoked key within `SWITCHYARD_GATEWAY_KEY_CACHE_S`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError

from switchyard.libs.bus import Bus
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.store.key_admin import (
    Change,
    KeyUpdate,
    KeyView,
    NewKey,
    OnChange,
    ResolveModel,
    create_key,
    revoke_key,
    rotate_key,
    update_key,
)
from switchyard.libs.store.keys import TIERS, KeyStore
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas.keys import KeyChanged
from switchyard.schemas.subjects import KEYS_CHANGED
from switchyard.services.gateway.key_policy import resolve_served
from switchyard.services.gateway.settings import GatewaySettings

CONNECT_S = 3.0


def _policy_args(p: argparse.ArgumentParser, creating: bool) -> None:
    p.add_argument("--tier", required=creating, choices=TIERS)
    p.add_argument("--name")
    p.add_argument("--models", help="comma-separated model names the key may use; empty: every model")
    p.add_argument("--budget-day", type=int, help="tokens per UTC day (prompt + completion)")
    p.add_argument("--budget-month", type=int, help="tokens per UTC month")
    p.add_argument("--expires", help="ISO 8601 or epoch ms")
    if not creating:
        p.add_argument(
            "--clear", action="append", default=[], choices=["models", "budget-day", "budget-month", "expires"]
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="keys", description="Manage Switchyard API keys")
    p.add_argument("--database-url", help="defaults to the gateway's store")
    p.add_argument("--nats-url", help="where to announce changes (defaults to the gateway's bus)")
    sub = p.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", default="")
    create.add_argument("--admin", action="store_true")
    _policy_args(create, creating=True)
    listing = sub.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant")
    for name, what in (("show", "one key"), ("rotate", "a new secret, printed once"), ("revoke", "revoke a key")):
        sub.add_parser(name, help=what).add_argument("id")
    update = sub.add_parser("update", help="change a key's name, tier, models, budgets or expiry")
    update.add_argument("id")
    _policy_args(update, creating=False)
    return p


_FIELDS = {
    "name": "name",
    "tier": "tier",
    "budget_day": "budget_tokens_per_day",
    "budget_month": "budget_tokens_per_month",
    "expires": "expires_at",
}

_CLEARABLE = {
    "models": "models",
    "budget-day": "budget_tokens_per_day",
    "budget-month": "budget_tokens_per_month",
    "expires": "expires_at",
}


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        field: getattr(args, arg) for arg, field in _FIELDS.items() if getattr(args, arg) is not None
    }
    if args.models is not None:
        out["models"] = [m for m in args.models.split(",") if m.strip()]
    for cleared in getattr(args, "clear", []):
        out[_CLEARABLE[cleared]] = None
    return out


def _row(k: KeyView) -> str:
    models = ",".join(k.models) if k.models else "*"
    budgets = f"{k.budget_tokens_per_day or '-'}/{k.budget_tokens_per_month or '-'}"
    return (
        f"{k.id:22} {k.prefix:12} {k.tenant:16} {k.user:16} {k.tier:5} {k.admin!s:5} {k.state:8} "
        f"{budgets:15} {k.expires_at or '-':20} {models}"
    )


@asynccontextmanager
async def _announcer(nats_url: str) -> AsyncIterator[OnChange]:
    try:
        bus = await asyncio.wait_for(
            Bus.connect(nats_url, "cli", uuid.uuid4().hex[:6], setup_tracing("cli")), CONNECT_S
        )
    except Exception:
        print(f"bus at {nats_url} unreachable: gateways see a change within their key cache's TTL", file=sys.stderr)
        yield None
        return

    async def announce(key_id: str, change: Change) -> None:
        await bus.publish(KEYS_CHANGED, KeyChanged(key_id=key_id, change=change, ts_ms=now_ms()))
        await bus.flush()

    try:
        yield announce
    finally:
        await bus.close()


async def _change(
    args: argparse.Namespace, store: KeyStore, on_change: OnChange, resolve: ResolveModel | None = None
) -> int:
    """`resolve`: model names and aliases to served models (the settings' registry)."""
    now = now_ms()
    if args.command == "create":
        spec = NewKey.model_validate({"tenant": args.tenant, "user": args.user, "admin": args.admin, **_policy(args)})
        made = await create_key(store, spec, now, on_change, resolve)
        print(made.key)
        print(_row(made), file=sys.stderr)
        print("Store this key now: it cannot be shown again.", file=sys.stderr)
        return 0
    if args.command == "update":
        view = await update_key(store, args.id, KeyUpdate.model_validate(_policy(args)), now, on_change, resolve)
    elif args.command == "rotate":
        got = await rotate_key(store, args.id, now, on_change)
        if got is not None:
            print(got.key)
            print("The old secret no longer works. Store this one now: it cannot be shown again.", file=sys.stderr)
            return 0
        view = None
    else:
        live = await store.get(args.id)
        view = None if live is None or live.revoked is not None else await revoke_key(store, args.id, now, on_change)
        if view is not None:
            print(f"revoked {args.id}")
            return 0
    if view is None:
        print(f"no live key {args.id}", file=sys.stderr)
        return 1
    print(_row(view))
    return 0


def settings_for(args: argparse.Namespace, settings: GatewaySettings) -> GatewaySettings:
    """The gateway's settings with this command's flags over them: one place decides where the store and the
    bus are, the gateway's own `db_url()` included."""
    flags = {"database_url": args.database_url, "nats_url": args.nats_url}
    return settings.model_copy(update={k: v for k, v in flags.items() if v})


async def _run(args: argparse.Namespace, settings: GatewaySettings) -> int:
    store = await KeyStore.open(settings.db_url())
    try:
        if args.command == "list":
            print(
                f"{'ID':22} {'PREFIX':12} {'TENANT':16} {'USER':16} {'TIER':5} {'ADMIN':5} {'STATE':8} "
                f"{'BUDGET D/M':15} {'EXPIRES':20} MODELS"
            )
            for k in await store.list(args.tenant):
                print(_row(KeyView.of(k, now_ms())))
            return 0
        if args.command == "show":
            key = await store.get(args.id)
            if key is None:
                print(f"no key {args.id}", file=sys.stderr)
                return 1
            print(KeyView.of(key, now_ms()).model_dump_json(indent=2))
            return 0

        # Only a change a gateway may have cached needs announcing; a new key works at once anyway.
        # The models the settings serve; one added at run time (`/v1/admin/models`) is known to the gateway only.
        def resolve(name: str) -> str | None:
            return resolve_served(settings.registry, name)

        if args.command == "create":
            return await _change(args, store, None, resolve)
        async with _announcer(settings.nats_url) as on_change:
            return await _change(args, store, on_change, resolve)
    except (ValidationError, ValueError) as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2
    finally:
        await store.close()


def main(argv: list[str] | None = None, settings: GatewaySettings | None = None) -> int:
    """`settings`: the gateway's, built once by the caller (`switchyard keys`); read here when run alone."""
    args = _parser().parse_args(argv)
    return asyncio.run(_run(args, settings_for(args, settings or GatewaySettings())))


if __name__ == "__main__":
    sys.exit(main())
