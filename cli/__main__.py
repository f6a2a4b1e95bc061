"""`switchyard run | keys ... | replay ... | export ...`"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from cli.stack import Stack

    stack = Stack(
        data_dir=Path(os.environ.get("SWITCHYARD_DATA_DIR", "var")).resolve(),
        port=int(os.environ.get("SWITCHYARD_PORT", "8000")),
        nats_url=os.environ.get("NATS_URL"),
    )
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    print("starting nats-server and eight services (the first start converts the model; it takes a minute)...")
    try:
        stack.start(timeout_s=args.timeout)
        print(
            f"\nSwitchyard is ready:\n  chat     {stack.url}\n  console  {stack.url}/console\n"
            f"  API key  {stack.api_key}\n  admin    {stack.admin_key}\n  logs     {stack.data_dir}/logs/\n"
            f"\ntry:\n  curl -N {stack.url}/chat -H 'Authorization: Bearer {stack.api_key}' "
            '-H \'content-type: application/json\' -d \'{"chatId":"demo","text":"Hello!"}\'\n\nCtrl-C stops.'
        )
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C must not cut the shutdown short and leave services running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("\nstopping...")
        stack.stop()
        print("stopped.")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="switchyard")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="start nats-server and every service; print the chat URL")
    p_run.add_argument("--timeout", type=float, default=600.0)
    sub.add_parser("keys", help="create, list and revoke API keys", add_help=False)
    sub.add_parser("replay", help="replay logged requests and report changed outputs", add_help=False)
    sub.add_parser("export", help="write logged requests or preference pairs as JSONL", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.cmd == "run":
        return run(args)
    if args.cmd == "keys":
        from cli.keys import main as keys_main

        return keys_main(rest)
    if args.cmd == "replay":
        from cli.replay import main as replay_main

        return replay_main(rest)
    if args.cmd == "export":
        from cli.export import main as export_main

        return export_main(rest)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
