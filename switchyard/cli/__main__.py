"""`switchyard run | status | keys ... | replay ... | export ... | export-hf DIR`"""

from __future__ import annotations

import argparse
import signal
import sys

from switchyard.cli.settings import CliSettings


def run(args: argparse.Namespace, settings: CliSettings) -> int:
    from switchyard.cli.stack import SERVICES, Stack, StackStopping
    from switchyard.cli.supervise import Backoff

    services = tuple(args.services.split(",")) if args.services else SERVICES
    unknown = [s for s in services if s not in SERVICES]
    if unknown:
        print(f"unknown service(s): {', '.join(unknown)}; choose from {', '.join(SERVICES)}", file=sys.stderr)
        return 2
    stack = Stack(
        data_dir=settings.data_dir.resolve(),
        port=settings.port,
        nats_url=settings.nats_url,
        nats_sync_interval=settings.nats_sync_interval or None,
        api_key=settings.api_key,
        admin_key=settings.admin_key,
        services=services,
        supervise=not args.no_restart,
        backoff=Backoff(initial_s=args.restart_delay, cap_s=args.restart_max_delay),
        echo_events=True,
        pools=settings.extra_pools(),
        registry=settings.registry,
        interpreters=settings.interpreters(),
    )

    def on_signal(signum: int, _frame: object) -> None:
        # Only sets a latch (no lock, no exception): the main thread does the stopping, whatever it was
        # doing when the signal came. Installed for SIGINT too, which a shell ignores in a background job.
        stack.request_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(
        f"starting nats-server and {len(services)} services, one inference pool per model "
        f"({', '.join(settings.registry.names())}); the first start converts the models: it takes a minute or two..."
    )
    try:
        stack.start(timeout_s=args.timeout)
        if "gateway" in services:
            print(
                f"\nSwitchyard is ready:\n  chat     {stack.url}\n  console  {stack.url}/console\n"
                f"  API key  {stack.api_key}\n  admin    {stack.admin_key}\n  logs     {stack.data_dir}/logs/\n"
                f"  models   {stack.url}/v1/admin/models (admin key: add, list, remove at run time)\n"
                f"  metrics  {stack.url}/metrics (gateway), http://127.0.0.1:{stack.metrics_port}/metrics (inference)"
                + "".join(f", http://127.0.0.1:{p}/metrics ({t})" for t, p in stack.replica_metrics_ports.items())
                + "\n"
                f"\ntry:\n  curl -N {stack.url}/chat -H 'Authorization: Bearer {stack.api_key}' "
                '-H \'content-type: application/json\' -d \'{"chatId":"demo","text":"Hello!"}\'\n\nCtrl-C stops.',
                flush=True,
            )
        else:
            print(f"ready: {', '.join(services)} (status: python -m switchyard.cli status)", flush=True)
        stack.wait_stop_requested()
    except StackStopping:
        pass
    finally:
        print("\nstopping...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
    return 0


def status(args: argparse.Namespace, settings: CliSettings) -> int:
    import json

    from switchyard.cli.supervise import print_status, read_status

    path = settings.data_dir / "stack.json"
    doc = read_status(path)
    if doc is None:
        print(f"no stack status at {path}: is `switchyard run` started from here?", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_status(doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="switchyard")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="start nats-server and every service; print the chat URL")
    p_run.add_argument("--timeout", type=float, default=600.0)
    p_run.add_argument("--services", help="comma-separated subset to start (default: all eight)")
    p_run.add_argument("--no-restart", action="store_true", help="do not restart a service that exits")
    p_run.add_argument("--restart-delay", type=float, default=0.5, help="first restart delay, doubled each time")
    p_run.add_argument("--restart-max-delay", type=float, default=30.0, help="the longest restart delay")
    p_status = sub.add_parser("status", help="what `run` started: each service's state, pid and restart count")
    p_status.add_argument("--json", action="store_true")
    sub.add_parser("keys", help="create, list, show, update, rotate and revoke API keys", add_help=False)
    sub.add_parser("replay", help="replay logged requests and report changed outputs", add_help=False)
    sub.add_parser("export", help="write logged requests or preference pairs as JSONL", add_help=False)
    sub.add_parser("export-hf", help="write a Hugging Face checkpoint directory from the GGUF", add_help=False)
    args, rest = parser.parse_known_args(argv)
    settings = CliSettings()
    if args.cmd == "run":
        return run(args, settings)
    if args.cmd == "status":
        return status(args, settings)
    if args.cmd == "keys":
        from switchyard.cli.keys import main as keys_main
        from switchyard.services.gateway.settings import GatewaySettings

        # The key store is the gateway's: where it is, its settings say (SWITCHYARD_GATEWAY_DATABASE_URL,
        # SWITCHYARD_DATA_DIR, NATS_URL).
        return keys_main(rest, GatewaySettings())
    if args.cmd == "replay":
        from switchyard.cli.replay import main as replay_main

        return replay_main(rest, settings)
    if args.cmd == "export":
        from switchyard.cli.export import main as export_main

        return export_main(rest, settings)
    if args.cmd == "export-hf":
        from switchyard.cli.export_hf import main as export_hf_main

        return export_hf_main(rest)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
