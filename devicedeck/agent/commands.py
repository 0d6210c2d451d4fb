"""`devicedeck agent`: run the node agent until SIGTERM or SIGINT.

    devicedeck agent --node NAME --server URL [--ca-file PEM] --token-file PATH \\
        --kubelet-root DIR [--tap RESOURCE[=SOCKET] ...] [--dra-health [--dra-plugins-dir DIR]] \\
        [--interval SECONDS] [--pods-interval SECONDS] [--metrics-port PORT]

The token comes from --token-file (re-read whenever the file changes) or DEVICEDECK_TOKEN;
the node name from --node or NODE_NAME (set it from spec.nodeName in a DaemonSet).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "agent",
        help="run the node agent: read the kubelet, push snapshots to the service",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node", help="this node's name (default: $NODE_NAME)")
    parser.add_argument(
        "--server",
        required=True,
        help="service URL, e.g. http://devicedeck:8000 or https://devicedeck:8443",
    )
    parser.add_argument(
        "--ca-file",
        type=Path,
        metavar="PATH",
        help="PEM file of the CA certificates an https:// --server's certificate is checked "
        "against (default: the system's)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="file holding the ingest token, re-read when it changes; without it the token "
        "itself is taken from the DEVICEDECK_TOKEN environment variable",
    )
    parser.add_argument(
        "--kubelet-root",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the kubelet's root directory (default /var/lib/kubelet)",
    )
    parser.add_argument(
        "--tap",
        action="append",
        default=[],
        metavar="RESOURCE[=SOCKET]",
        help="open the agent's own ListAndWatch stream on this resource's plugin (repeatable; "
        "off by default: plugins sharing one health channel between streams lose events)",
    )
    parser.add_argument(
        "--dra-health",
        action="store_true",
        help="open the agent's own DRA health stream (DRAResourceHealth/NodeWatchResources) "
        "on every DRA driver socket found under --dra-plugins-dir (off by default, like --tap: "
        "a driver that does not send every change to every stream could lose one for the "
        "kubelet)",
    )
    parser.add_argument(
        "--dra-plugins-dir",
        type=Path,
        metavar="DIR",
        help="where DRA drivers keep DRIVER/dra.sock (default KUBELET_ROOT/plugins); "
        "looked at again every --interval",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="full re-read of the kubelet every SECONDS (default 10, at least 1)",
    )
    parser.add_argument(
        "--pods-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="ask the kubelet for its pods every SECONDS, to see pods end (default 1, at "
        "least 1, at most --interval)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="re-send every snapshot this often (default 30)",
    )
    parser.add_argument(
        "--max-backoff",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest wait between retries (default 30)",
    )
    parser.add_argument(
        "--auth-retry",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wait after a 401/403 unless the token file changes (default 60)",
    )
    parser.add_argument("--metrics-port", type=int, metavar="PORT", help="serve /healthz, /metrics")
    parser.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="ADDRESS",
        help="address for --metrics-port (default 0.0.0.0)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.set_defaults(func=run)


def _config_problem(args: argparse.Namespace) -> str | None:
    from devicedeck.kubelet.names import dns1123_subdomain_problem

    if not args.node:
        return "--node: required (or set NODE_NAME)"
    problem = dns1123_subdomain_problem(args.node)
    if problem:
        return f"--node: {args.node!r} {problem}"
    url = urlsplit(args.server)
    if url.scheme not in ("http", "https") or not url.netloc:
        # Not repeated: a URL may carry credentials.
        return "--server: must be an http:// or https:// URL"
    if args.ca_file is not None and url.scheme != "https":
        return "--ca-file: only with an https:// --server"
    if args.interval < 1:
        return "--interval: must be at least 1 second"
    if not 1 <= args.pods_interval <= args.interval:
        return "--pods-interval: must be at least 1 second and at most --interval"
    for name in ("heartbeat", "max_backoff", "auth_retry"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')}: must be positive"
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        return "--metrics-port: must be between 0 and 65535"
    if args.dra_plugins_dir is not None and not args.dra_health:
        return "--dra-plugins-dir: only with --dra-health"
    return None


def run(args: argparse.Namespace) -> int:
    from devicedeck.agent.agent import Agent, AgentConfig
    from devicedeck.agent.plugin_sockets import TapSpec
    from devicedeck.config import LogFormat
    from devicedeck.kubelet.paths import plugins_dir
    from devicedeck.logs import configure_logging
    from devicedeck.signals import stop_on_signals, wait_for_stop

    # The HTTP client's line per request is held back by configure_logging; the token, were
    # it ever in a message, would be written as ***.
    configure_logging(
        LogFormat(args.log_format), args.log_level, [os.environ.get("DEVICEDECK_TOKEN", "")]
    )
    args.node = args.node or os.environ.get("NODE_NAME")
    problem = _config_problem(args)
    taps: list[TapSpec] = []
    try:
        taps = [TapSpec.parse(t) for t in args.tap]
    except ValueError as e:
        problem = problem or str(e)
    if problem:
        log.error("invalid arguments", extra={"event": "invalid_arguments", "reason": problem})
        return EXIT_USAGE
    if args.token_file is None and not os.environ.get("DEVICEDECK_TOKEN"):
        log.warning(
            "no --token-file and no DEVICEDECK_TOKEN; posting without a token works only with "
            "a service running DEVICEDECK_AUTH=off",
            extra={"event": "no_token"},
        )
    config = AgentConfig(
        node=args.node,
        server=args.server,
        kubelet_root=args.kubelet_root,
        token_file=args.token_file,
        token=None if args.token_file else os.environ.get("DEVICEDECK_TOKEN"),
        taps=tuple(taps),
        interval=args.interval,
        pods_interval=args.pods_interval,
        heartbeat=args.heartbeat,
        max_backoff=args.max_backoff,
        auth_retry=args.auth_retry,
        metrics_host=args.metrics_address,
        metrics_port=args.metrics_port,
        dra_plugins_dir=(args.dra_plugins_dir or plugins_dir(args.kubelet_root))
        if args.dra_health
        else None,
        ca_file=args.ca_file,
    )
    with stop_on_signals() as stop:
        try:
            agent = Agent(config)
        except OSError as e:
            log.error("start failed", extra={"event": "start_failed", "reason": str(e)})
            return 1
        agent.start()
        try:
            wait_for_stop(stop)
        finally:
            agent.stop()
    return 0
