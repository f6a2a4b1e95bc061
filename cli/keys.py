"""`keys create --tenant T --tier free|pro [--user U] [--admin]`, `keys list`, `keys revoke ID`.

Uses the gateway's settings (`SWITCHYARD_GATEWAY_DATABASE_URL`, `SWITCHYARD_DATA_DIR`), so it edits the
same store the gateway reads. The raw key is printed once; only its hash is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys

from libs.store.keys import TIERS, KeyStore
from services.gateway.settings import GatewaySettings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="keys", description="Manage Switchyard API keys")
    p.add_argument("--database-url", help="defaults to the gateway's store")
    sub = p.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--tier", required=True, choices=TIERS)
    create.add_argument("--user", default="")
    create.add_argument("--admin", action="store_true")
    sub.add_parser("list", help="list keys (never the keys themselves)")
    revoke = sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    return p


def _when(ms: int | None) -> str:
    return "-" if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


async def _run(args: argparse.Namespace) -> int:
    url = args.database_url or GatewaySettings().db_url()
    store = await KeyStore.open(url)
    try:
        if args.command == "create":
            key, raw = await store.create(args.tenant, args.tier, user=args.user, admin=args.admin)
            print(raw)
            print(f"id={key.id} tenant={key.tenant} user={key.user} tier={key.tier} admin={key.admin}", file=sys.stderr)
            print("Store this key now: it cannot be shown again.", file=sys.stderr)
            return 0
        if args.command == "list":
            print(f"{'ID':22} {'PREFIX':12} {'TENANT':16} {'USER':16} {'TIER':5} {'ADMIN':5} {'CREATED':19} REVOKED")
            for k in await store.list():
                print(
                    f"{k.id:22} {k.prefix:12} {k.tenant:16} {k.user:16} {k.tier:5} {k.admin!s:5} "
                    f"{_when(k.created):19} {_when(k.revoked)}"
                )
            return 0
        if await store.revoke(args.id):
            print(f"revoked {args.id}")
            return 0
        print(f"no live key {args.id}", file=sys.stderr)
        return 1
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(_run(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
