"""The simulator's subcommands: sim-kubelet, sim-node and sim-ctl (sim-plugin lives in
plugin_cli). ``python -m devicedeck.sim.commands ...`` runs them without the rest of the CLI."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devicedeck.kubelet.paths import dra_plugin_socket
from devicedeck.logs import configure_logging_once
from devicedeck.signals import stop_on_signals, wait_for_stop
from devicedeck.sim import ctl
from devicedeck.sim.apiserver import commands as apiserver_commands
from devicedeck.sim.dra_driver import BROKEN_GPU, BROKEN_GPU_MESSAGE, DraDriverSpec, SimDraDriver
from devicedeck.sim.dra_health_server import (
    SimDraHealthServer,
    control_dispatch,
    dra_control_socket_path,
)
from devicedeck.sim.kubeclient import KubeClient
from devicedeck.sim.kubelet import SimKubelet
from devicedeck.sim.kubelet.control import ControlServer
from devicedeck.sim.kubelet.devices import DEFAULT_GRACE_SECONDS
from devicedeck.sim.kubelet.topology import DEFAULT_POLICY, POLICIES
from devicedeck.sim.node import PluginSpec, SimNode, parse_node_health_event
from devicedeck.sim.plugin import DEFAULT_NODE_NAME, HealthEvent
from devicedeck.sim.workload import DEFAULT_INTERVAL_SECONDS

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    kubelet = subparsers.add_parser(
        "sim-kubelet",
        help="run a simulated kubelet (device manager, plugin watcher, PodResources)",
        description="Serve the kubelet's device plugin registration, plugin watcher and "
        "PodResources API under --root, with the kubelet's directory layout.",
    )
    _common(kubelet)
    kubelet.add_argument(
        "--node",
        default=DEFAULT_NODE_NAME,
        help="the node's name in the cluster (with --kubeconfig)",
    )
    kubelet.set_defaults(func=run_kubelet)

    node = subparsers.add_parser(
        "sim-node",
        help="run a simulated kubelet with simulated device plugins in one process",
        description="A sim-kubelet and its sim-plugins in one process, for demos.",
    )
    _common(node)
    node.add_argument(
        "--plugin",
        action="append",
        required=True,
        type=_plugin_spec,
        metavar="RESOURCE:COUNT[:PROFILE]",
        help="a plugin to run, e.g. nvidia.com/gpu:8:gpu (repeatable; profile dongle|gpu|mig)",
    )
    node.add_argument(
        "--workload", type=int, metavar="SEED", help="create and delete pods over time, seeded"
    )
    node.add_argument(
        "--workload-interval",
        type=float,
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="SECONDS",
        help=f"time between workload steps (default {DEFAULT_INTERVAL_SECONDS:g})",
    )
    node.add_argument(
        "--flaky",
        action="append",
        default=[],
        type=_flaky_spec,
        metavar="RESOURCE:COUNT",
        help="COUNT devices of RESOURCE, chosen from the workload's seed, take most of its "
        "flaps (repeatable)",
    )
    node.add_argument(
        "--numa",
        type=int,
        metavar="K",
        help="NUMA nodes for every plugin (default: 2 for gpu and mig, none for dongle)",
    )
    node.add_argument("--seed", type=int, default=0, help="seed for device ids (default 0)")
    node.add_argument(
        "--health-event",
        action="append",
        default=[],
        type=_health_event,
        metavar="'RESOURCE AT_SECONDS DEVICE_ID ACTION'",
        help="change a device after start: Healthy|Unhealthy|unplug|plug, DEVICE_ID may be #N "
        "(repeatable)",
    )
    node.add_argument(
        "--node",
        default=DEFAULT_NODE_NAME,
        help="the node name: device ids derive from it, and the cluster knows the node by it",
    )
    node.set_defaults(func=run_node)

    ctl.register(subparsers)
    apiserver_commands.register(subparsers)

    dra = subparsers.add_parser(
        "sim-dra-driver",
        help="publish a simulated DRA driver's GPUs and claims using them to an API server, "
        "and serve their health stream",
        description="With --kubeconfig: write a ResourceSlice of one node's GPUs and, using "
        "them, a pod with a template claim, a pod whose GPU the driver reports not ready and a "
        "monitor's admin-access claim, through that API server; kept so while it runs. With "
        "--root: serve the GPUs' health stream (DRAResourceHealth) on "
        "ROOT/plugins/DRIVER/dra.sock, its health changed with `sim-ctl --root ROOT dra health`.",
    )
    dra.add_argument("--kubeconfig", type=Path, help="the API server to write to")
    dra.add_argument(
        "--root", type=Path, help="kubelet root directory to serve the health stream under"
    )
    dra.add_argument("--node", required=True, help="the node whose GPUs the driver publishes")
    dra.add_argument("--devices", type=int, default=4, help="GPUs in the node's pool (default 4)")
    dra.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    dra.set_defaults(func=run_dra_driver)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", required=True, type=Path, help="kubelet root directory")
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        metavar="SECONDS",
        help="how long a dead plugin's devices count before capacity drops to 0 (default 300)",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="join the cluster of this kubeconfig's API server: register the node, keep its "
        "status (capacity and allocatable per device resource) and write a Pod per pod",
    )
    parser.add_argument(
        "--topology-manager-policy",
        choices=POLICIES,
        default=DEFAULT_POLICY,
        help=f"NUMA alignment of devices, as the kubelet's (default {DEFAULT_POLICY}: none; "
        "the device plugin's preferred allocation decides)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def _cluster_options(args: argparse.Namespace) -> dict[str, Any]:
    """SimKubelet options from the common flags; ValueError for an unusable kubeconfig."""
    client = KubeClient.from_kubeconfig(args.kubeconfig) if args.kubeconfig else None
    return {"kube_client": client, "topology_policy": args.topology_manager_policy}


def _plugin_spec(text: str) -> PluginSpec:
    try:
        return PluginSpec.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _flaky_spec(text: str) -> tuple[str, int]:
    resource, _, count = text.rpartition(":")
    if not resource or not count.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected RESOURCE:COUNT")
    return resource, int(count)


def _health_event(text: str) -> tuple[str, HealthEvent]:
    try:
        return parse_node_health_event(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _configure_logging(level: str) -> None:
    configure_logging_once(level)


def _run_until_signal(start: Callable[[], None], stop: Callable[[], None]) -> int:
    with stop_on_signals() as stop_requested:
        try:
            try:
                start()
            except (OSError, RuntimeError, ValueError) as e:
                log.error("start failed", extra={"reason": e})
                return 1
            wait_for_stop(stop_requested)
            return 0
        finally:
            stop()


def run_kubelet(args: argparse.Namespace) -> int:
    _configure_logging(args.log_level)
    try:
        kubelet = SimKubelet(
            args.root, grace_seconds=args.grace, node_name=args.node, **_cluster_options(args)
        )
    except ValueError as e:
        log.error("invalid arguments", extra={"reason": e})
        return 2
    return _run_until_signal(kubelet.start, kubelet.stop)


def run_node(args: argparse.Namespace) -> int:
    _configure_logging(args.log_level)
    try:
        node = SimNode(
            args.root,
            args.plugin,
            workload_seed=args.workload,
            workload_interval=args.workload_interval,
            grace_seconds=args.grace,
            numa_nodes=args.numa,
            seed=args.seed,
            node_name=args.node,
            health_events=args.health_event,
            flaky=dict(args.flaky),
            **_cluster_options(args),
        )
    except ValueError as e:
        log.error("invalid arguments", extra={"reason": e})
        return 2
    return _run_until_signal(node.start, node.stop)


def run_dra_driver(args: argparse.Namespace) -> int:
    _configure_logging(args.log_level)
    if not 2 <= args.devices <= 64:
        log.error("invalid arguments", extra={"reason": "--devices must be from 2 to 64"})
        return 2
    if args.kubeconfig is None and args.root is None:
        log.error("invalid arguments", extra={"reason": "give --kubeconfig, --root or both"})
        return 2
    spec = DraDriverSpec(args.node, args.devices)
    parts: list[Any] = []
    try:
        if args.kubeconfig is not None:
            parts.append(SimDraDriver(KubeClient.from_kubeconfig(args.kubeconfig), spec))
        if args.root is not None:
            health = SimDraHealthServer(
                dra_plugin_socket(args.root, spec.driver),
                spec.node,
                spec.device_names,
                unhealthy={BROKEN_GPU: BROKEN_GPU_MESSAGE},
            )
            control = ControlServer(dra_control_socket_path(args.root), control_dispatch(health))
            parts += [health, control]
    except ValueError as e:
        log.error("invalid arguments", extra={"reason": e})
        return 2

    def start() -> None:
        for part in parts:
            part.start()

    def stop() -> None:
        for part in reversed(parts):
            part.stop()

    return _run_until_signal(start, stop)


def main(argv: Sequence[str] | None = None) -> int:
    from devicedeck.sim import plugin_cli

    parser = argparse.ArgumentParser(prog="devicedeck", description="Devicedeck simulators.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register(subparsers)
    plugin_cli.register(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
