"""`switchyard export --requests out.jsonl [--tenant T --since ... --status ...]` and
`switchyard export --preferences out.jsonl [--tenant T]`: JSONL datasets from the logged records,
through the gateway's admin API (the same URL and key as `switchyard replay`)."""

from __future__ import annotations

import argparse
import sys

from switchyard.cli.replay import add_connection_args, client
from switchyard.cli.settings import CliSettings


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard export", description="Export logged requests or preference pairs")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--requests", metavar="FILE", help="logged requests, one JSON object a line ('-' = stdout)")
    what.add_argument("--preferences", metavar="FILE", help="preference pairs as prompt/chosen/rejected")
    p.add_argument("--tenant")
    p.add_argument("--status")
    p.add_argument("--model")
    p.add_argument("--api")
    p.add_argument("--since", help="epoch ms or ISO 8601")
    p.add_argument("--until", help="epoch ms or ISO 8601")
    p.add_argument("--include-replays", action="store_true", help="replays are left out unless asked for")
    p.add_argument("--max", type=int, help="at most this many requests")
    add_connection_args(p)
    return p


def main(argv: list[str] | None, settings: CliSettings) -> int:
    args = _parser().parse_args(argv)
    if args.requests:
        path, out_file = "/v1/admin/export/requests", args.requests
        params = {
            k: v
            for k, v in {
                "tenant": args.tenant,
                "status": args.status,
                "model": args.model,
                "api": args.api,
                "since": args.since,
                "until": args.until,
                "max": args.max,
                "replays": None if args.include_replays else "false",
            }.items()
            if v is not None
        }
    else:
        path, out_file = "/v1/admin/export/preferences", args.preferences
        params = {"tenant": args.tenant} if args.tenant else {}
    rows = 0
    with client(args, settings) as c, c.stream("GET", path, params=params) as r:
        if r.status_code != 200:
            r.read()
            print(f"export failed: HTTP {r.status_code} {r.text[:300]}", file=sys.stderr)
            return 1
        out = sys.stdout if out_file == "-" else open(out_file, "w", encoding="utf-8")
        try:
            for line in r.iter_lines():
                if line.strip():
                    out.write(line + "\n")
                    rows += 1
        finally:
            if out is not sys.stdout:
                out.close()
    print(f"wrote {rows} rows to {out_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(None, CliSettings()))
