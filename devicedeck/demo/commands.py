"""Demo subcommands: demo (everything locally), demo-token and demo-workload (used by
docker-compose.yml, where the pieces run in separate containers)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from devicedeck.demo.topology import WORKLOAD_INTERVAL_SECONDS
from devicedeck.logs import configure_logging_once
from devicedeck.signals import stop_on_signals

DEFAULT_DATA_DIR = Path("devicedeck-data")


def register(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run the service, three simulated nodes and their agents locally",
        description="Run the service on SQLite with three simulated nodes (kubelet, device "
        "plugins, a workload of pods coming and going) and a node agent each. Authentication "
        "is off: the demo is for your own machine. Everything is kept in --data-dir, so "
        "running it again continues with the same data. Ctrl-C stops it all.",
    )
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on")
    demo.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="where the database, token, kubelet roots and logs live "
        f"(default ./{DEFAULT_DATA_DIR})",
    )
    demo.set_defaults(func=run_demo)

    token = subparsers.add_parser(
        "demo-token",
        help="make sure FILE holds a valid token, creating one if needed",
        description="Keep an API token in a file (mode 0600): a valid token there is kept, "
        "otherwise a new one is created in the database (DEVICEDECK_DATABASE_URL) and "
        "written. Idempotent, for one-shot setup containers.",
    )
    token.add_argument("--file", required=True, type=Path, help="where the token is kept")
    token.add_argument("--name", default="agents", help="name for a new token (default agents)")
    token.add_argument(
        "--scope",
        action="append",
        choices=["read", "ingest", "admin"],
        help="scope of a new token, repeatable (default ingest)",
    )
    token.add_argument(
        "--node",
        action="append",
        help="keep one token per node, bound to it: FILE holds {node}, NAME gets -NODE "
        "(repeatable)",
    )
    token.set_defaults(func=run_demo_token)

    workload = subparsers.add_parser(
        "demo-workload",
        help="create and delete pods on a sim-kubelet over its control socket",
        description="Drive a running sim-kubelet under --root: create pods asking for its "
        "devices and delete them again, seeded, until SIGINT or SIGTERM.",
    )
    workload.add_argument("--root", required=True, type=Path, help="kubelet root directory")
    workload.add_argument("--seed", type=int, default=0, help="seed for the decisions")
    workload.add_argument(
        "--interval",
        type=float,
        default=WORKLOAD_INTERVAL_SECONDS,
        metavar="SECONDS",
        help=f"time between steps (default {WORKLOAD_INTERVAL_SECONDS:g})",
    )
    workload.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    workload.set_defaults(func=run_demo_workload)

    receiver = subparsers.add_parser(
        "demo-receiver",
        help="receive webhook notifications and log each alert (the demo's receiver)",
        description="A webhook receiver that takes Alertmanager-style messages, as the "
        "service sends them with DEVICEDECK_WEBHOOK_URL, and logs one line per alert "
        "(firing or resolved), until SIGINT or SIGTERM.",
    )
    receiver.add_argument("--host", default="127.0.0.1", help="address to listen on")
    receiver.add_argument("--port", type=int, required=True, help="port to listen on")
    receiver.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    receiver.set_defaults(func=run_demo_receiver)


def run_demo(args: argparse.Namespace) -> int:
    from devicedeck.demo.runner import Demo

    if not 0 < args.port < 65536:
        print("devicedeck demo: --port must be between 1 and 65535", file=sys.stderr)
        return 2
    return Demo(args.host, args.port, args.data_dir, sys.stdout).run()


def run_demo_token(args: argparse.Namespace) -> int:
    from devicedeck.config import load_settings
    from devicedeck.db import create_db_engine, make_session_factory
    from devicedeck.demo.tokens import ensure_token_file

    if args.node and "{node}" not in str(args.file):
        print("devicedeck demo-token: with --node, --file must contain {node}", file=sys.stderr)
        return 2
    wanted: list[tuple[Path, str, str | None]] = [
        (Path(str(args.file).replace("{node}", node)), f"{args.name}-{node}", node)
        for node in args.node or []
    ] or [(args.file, args.name, None)]
    engine = create_db_engine(load_settings().database_url)
    try:
        for path, name, node in wanted:
            _, created = ensure_token_file(
                make_session_factory(engine), path, name, args.scope or ["ingest"], node=node
            )
            print(f"{'created a new' if created else 'kept the'} token in {path}")
    finally:
        engine.dispose()
    return 0


def run_demo_workload(args: argparse.Namespace) -> int:
    from devicedeck.demo.workload import RemoteWorkload

    configure_logging_once(args.log_level)
    try:
        workload = RemoteWorkload(args.root, seed=args.seed, interval_seconds=args.interval)
    except ValueError as e:
        print(f"devicedeck demo-workload: {e}", file=sys.stderr)
        return 2
    with stop_on_signals() as stop:
        workload.run(stop)
    logging.getLogger(__name__).info(
        "workload stopped",
        extra={
            "event": "workload_stopped",
            "pods_created": workload.created,
            "pods_deleted": workload.deleted,
            "pods_rejected": workload.rejected,
        },
    )
    return 0


def run_demo_receiver(args: argparse.Namespace) -> int:
    from devicedeck.demo.receiver import serve

    configure_logging_once(args.log_level)
    if not 0 < args.port < 65536:
        print("devicedeck demo-receiver: --port must be between 1 and 65535", file=sys.stderr)
        return 2
    with stop_on_signals() as stop:
        try:
            serve(args.host, args.port, stop)
        except OSError as e:
            logging.getLogger(__name__).error(
                "receiver not started", extra={"event": "start_failed", "reason": e}
            )
            return 1
    return 0
