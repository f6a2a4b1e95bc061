"""`switchyard replay RID [--mode inference|pipeline] [--temperature T --seed S ...]` and
`switchyard replay --from requests.jsonl`: re-run logged requests through the gateway's admin API and
report whether each output changed.

The gateway is `SWITCHYARD_URL` (default http://127.0.0.1:$SWITCHYARD_PORT), the admin key
`SWITCHYARD_ADMIN_KEY` or `<SWITCHYARD_DATA_DIR>/admin-api-key` (what `switchyard run` saved).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx

from switchyard.cli.settings import CliSettings


def admin_key(explicit: str | None, settings: CliSettings) -> str:
    if explicit:
        return explicit
    if settings.admin_key:
        return settings.admin_key
    path = settings.data_dir / "admin-api-key"
    if path.exists():
        return path.read_text().strip()
    raise SystemExit(f"no admin key: set SWITCHYARD_ADMIN_KEY or start the stack once (it writes {path})")


def client(args: argparse.Namespace, settings: CliSettings, timeout: float = 300.0) -> httpx.Client:
    url = args.url.rstrip("/") if args.url else settings.gateway_url()
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {admin_key(args.key, settings)}"}, timeout=timeout
    )


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="gateway URL (default $SWITCHYARD_URL or http://127.0.0.1:$SWITCHYARD_PORT)")
    p.add_argument("--key", help="admin API key (default $SWITCHYARD_ADMIN_KEY or var/admin-api-key)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard replay", description="Replay logged requests")
    p.add_argument("rid", nargs="?", help="the request to replay")
    p.add_argument("--from", dest="from_file", help="replay every request of an exported JSONL file")
    p.add_argument("--mode", choices=("inference", "pipeline"), default="inference")
    p.add_argument("--model")
    p.add_argument("--reasoning", dest="gen_mode", action="store_const", const="reasoning")
    p.add_argument("--fast", dest="gen_mode", action="store_const", const="fast")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--json", action="store_true", help="print the replay results as JSON lines")
    add_connection_args(p)
    return p


def body(args: argparse.Namespace) -> dict[str, Any]:
    overrides = {
        "model": args.model,
        "mode": args.gen_mode,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
    }
    return {"mode": args.mode, "overrides": {k: v for k, v in overrides.items() if v is not None}}


def replay_one(c: httpx.Client, rid: str, payload: dict[str, Any]) -> dict[str, Any]:
    r = c.post(f"/v1/admin/replay/{rid}", json=payload)
    if r.status_code != 200:
        try:
            msg = r.json()["error"]["message"]
        except Exception:
            msg = r.text[:300]
        return {"replay_of": rid, "error": {"message": msg}, "status": "failed", "matched": False}
    result: dict[str, Any] = r.json()
    return result


def rids_from(path: str) -> list[str]:
    rids = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e.msg})") from e
            rid = row.get("rid") if isinstance(row, dict) else None
            if not isinstance(rid, str):
                raise SystemExit(f"{path}:{n}: no rid")
            rids.append(rid)
    return rids


def main(argv: list[str] | None, settings: CliSettings) -> int:
    args = _parser().parse_args(argv)
    if bool(args.rid) == bool(args.from_file):
        print("give a RID or --from FILE", file=sys.stderr)
        return 2
    payload = body(args)
    with client(args, settings) as c:
        if args.rid:
            res = replay_one(c, args.rid, payload)
            if args.json:
                print(json.dumps(res))
            elif res.get("status") == "failed":
                print(f"replay of {args.rid} failed: {res['error']['message']}", file=sys.stderr)
                return 1
            else:
                verdict = "matched token for token" if res["matched"] else "CHANGED"
                print(f"replay {res['rid']} of {args.rid} ({args.mode}): {res['status']}, {verdict}")
                if not res["matched"]:
                    print(res.get("diff") or f"original: {res['original_output']!r}\nreplay:   {res['output']!r}")
            return 0 if res.get("status") != "failed" else 1
        changed = failed = 0
        rids = rids_from(args.from_file)
        for rid in rids:
            res = replay_one(c, rid, payload)
            if args.json:
                print(json.dumps(res), flush=True)
            if res.get("status") == "failed":
                failed += 1
                if not args.json:
                    print(f"{rid}  FAILED   {res['error']['message']}", flush=True)
            elif not res["matched"]:
                changed += 1
                if not args.json:
                    print(f"{rid}  CHANGED  replay {res['rid']}", flush=True)
            elif not args.json:
                print(f"{rid}  same     replay {res['rid']}", flush=True)
        print(
            f"{len(rids)} replayed: {len(rids) - changed - failed} same, {changed} changed, {failed} failed",
            file=sys.stderr,
        )
        return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(None, CliSettings()))
