"""`devicedeck sim-plugin`: run one simulated device plugin against a kubelet root.

    devicedeck sim-plugin --root /tmp/node-a --resource example.com/dongle --count 4

The plugin serves DIR/device-plugins/<socket> and registers with
DIR/device-plugins/kubelet.sock (waiting for it if the kubelet is not up yet), then
runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from devicedeck.logs import configure_logging_once
from devicedeck.signals import stop_on_signals, wait_for_stop
from devicedeck.sim.plugin import (
    DEFAULT_NODE_NAME,
    PROFILES,
    HealthDriver,
    HealthEvent,
    SimDevicePlugin,
    parse_health_event,
    parse_health_script,
)

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim-plugin",
        help="run a simulated device plugin",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", required=True, type=Path, help="kubelet root directory")
    parser.add_argument("--resource", required=True, help="resource name, e.g. example.com/dongle")
    parser.add_argument("--count", required=True, type=int, help="number of devices")
    parser.add_argument("--profile", choices=PROFILES, default="dongle", help="device kind")
    parser.add_argument(
        "--numa",
        type=int,
        default=1,
        metavar="K",
        help="spread devices over K NUMA nodes; 0 reports no topology (default 1)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for ids and flaps")
    parser.add_argument("--node", default=DEFAULT_NODE_NAME, help="node name the ids derive from")
    parser.add_argument("--socket-name", help="plugin socket file name (default from resource)")
    parser.add_argument(
        "--flap-interval",
        type=float,
        metavar="SECONDS",
        help="toggle a random device's health about every SECONDS (default: never)",
    )
    parser.add_argument(
        "--health-script",
        type=Path,
        metavar="FILE",
        help="lines 'AT_SECONDS DEVICE_ID Healthy|Unhealthy|unplug|plug' (DEVICE_ID may be #N)",
    )
    parser.add_argument(
        "--health-event",
        action="append",
        default=[],
        metavar="'AT_SECONDS DEVICE_ID ACTION'",
        help="one line of a health script, as an option (repeatable)",
    )
    parser.add_argument(
        "--pre-start-required", action="store_true", help="ask for PreStartContainer"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configure_logging_once(args.log_level)
    events: list[HealthEvent] = []
    try:
        if args.health_script is not None:
            events = parse_health_script(args.health_script.read_text())
        events += [parse_health_event(line) for line in args.health_event]
        plugin = SimDevicePlugin(
            args.resource,
            root=args.root,
            count=args.count,
            profile=args.profile,
            numa_nodes=args.numa,
            seed=args.seed,
            node_name=args.node,
            socket_name=args.socket_name,
            pre_start_required=args.pre_start_required,
        )
        driver = HealthDriver(
            plugin, events=events, flap_interval=args.flap_interval, seed=args.seed
        )
    except (OSError, ValueError) as e:
        log.error("sim plugin invalid", extra={"event": "sim_plugin_invalid", "reason": e})
        return 2

    with stop_on_signals() as stop_requested:
        try:
            try:
                plugin.start()
            except (OSError, RuntimeError) as e:
                log.error("sim plugin failed", extra={"event": "sim_plugin_failed", "reason": e})
                return 1
            driver.start()
            wait_for_stop(stop_requested)
        finally:
            driver.stop()
            plugin.stop()
    return 0
