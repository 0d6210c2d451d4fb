"""`devicedeck sim-apiserver`: the simulated API server as a command."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from devicedeck.logs import configure_logging_once
from devicedeck.signals import stop_on_signals, wait_for_stop
from devicedeck.sim.apiserver.node_lifecycle import GRACE_SECONDS

log = logging.getLogger(__name__)

DEFAULT_PORT = 6443
KUBECONFIG_NAME = "kubeconfig"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sim-apiserver",
        help="run a simulated Kubernetes API server (nodes, pods, DRA objects, leases, tokens)",
        description="Serve the Kubernetes REST API Devicedeck and its users need (discovery, "
        "nodes with their status, pods, ResourceSlices, ResourceClaims, Leases, TokenRequest, "
        "TokenReview) over plain HTTP, keeping its state in --data-dir. Writes a kubeconfig "
        "with the server's URL and an admin token for kubectl, curl and the service.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument("--data-dir", required=True, type=Path, help="where the state is kept")
    parser.add_argument(
        "--kubeconfig-out",
        type=Path,
        help=f"where to write the kubeconfig (default DATA_DIR/{KUBECONFIG_NAME})",
    )
    parser.add_argument(
        "--server-url",
        help="the URL clients use to reach this server, written into the kubeconfig "
        "(default http://HOST:PORT)",
    )
    parser.add_argument(
        "--node-monitor-grace-period",
        type=float,
        default=GRACE_SECONDS,
        metavar="SECONDS",
        help="how long a node's lease may go unrenewed before its conditions turn Unknown "
        f"(default {GRACE_SECONDS:g})",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(func=run_apiserver)


def run_apiserver(args: argparse.Namespace) -> int:
    from devicedeck.sim.apiserver.server import SimApiServer

    configure_logging_once(args.log_level)
    if not 0 <= args.port < 65536:
        log.error("invalid arguments", extra={"reason": "--port must be between 0 and 65535"})
        return 2
    if not args.node_monitor_grace_period > 0:
        log.error(
            "invalid arguments", extra={"reason": "--node-monitor-grace-period must be above 0"}
        )
        return 2
    try:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        server = SimApiServer(
            args.data_dir,
            args.host,
            args.port,
            node_grace_seconds=args.node_monitor_grace_period,
        )
    except (OSError, ValueError) as e:
        log.error("start failed", extra={"reason": e})
        return 1
    kubeconfig = args.kubeconfig_out or args.data_dir / KUBECONFIG_NAME
    with stop_on_signals() as stop_requested:
        server.start()
        try:
            server.write_kubeconfig(kubeconfig, args.server_url)
            log.info(
                "kubeconfig written",
                extra={"path": kubeconfig, "server": args.server_url or server.url},
            )
            wait_for_stop(stop_requested)
        finally:
            server.stop()
    return 0
