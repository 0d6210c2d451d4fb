"""`devicedeck sim-ctl`: drive a running sim-kubelet or sim-node through its control socket.

    devicedeck sim-ctl --root DIR pod create NAMESPACE/NAME --request RESOURCE=COUNT [--container C]
    devicedeck sim-ctl --root DIR pod delete NAMESPACE/NAME
    devicedeck sim-ctl --root DIR pod list
    devicedeck sim-ctl --root DIR node status
    devicedeck sim-ctl --root DIR plugin status
    devicedeck sim-ctl --root DIR device health RESOURCE DEVICE_ID Healthy|Unhealthy
    devicedeck sim-ctl --root DIR device unplug|plug RESOURCE DEVICE_ID
    devicedeck sim-ctl --root DIR dra health DEVICE Healthy|Unhealthy|Unknown [--message TEXT]
    devicedeck sim-ctl --root DIR dra status

DEVICE_ID may be `#N` for the N-th device of the plugin. Device and plugin commands reach
plugins started by sim-node only; dra commands reach a sim-dra-driver started with the same
--root.
Exit codes: 0 done, 1 refused (the reason is on stderr), 2 bad arguments, 3 nothing answers
under --root. --json prints the raw result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from devicedeck.sim.dra_health_server import HEALTH_NAMES, dra_control_socket_path
from devicedeck.sim.kubelet.control import (
    ControlError,
    ControlUnavailable,
    call,
    control_socket_path,
)

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
DEFAULT_CONTAINER = "main"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim-ctl",
        help="create and delete simulated pods, change simulated devices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", required=True, type=Path, help="kubelet root directory")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    groups = parser.add_subparsers(
        dest="ctl_group", metavar="pod|node|plugin|device|dra", required=True
    )

    pod = groups.add_parser("pod", help="simulated pods").add_subparsers(
        dest="ctl_action", metavar="create|delete|list", required=True
    )
    create = pod.add_parser("create", help="create a pod; admission may refuse it")
    create.add_argument("pod", metavar="NAMESPACE/NAME")
    create.add_argument(
        "--request",
        action="append",
        default=[],
        metavar="RESOURCE=COUNT",
        help="devices for the container (repeatable)",
    )
    create.add_argument("--container", default=DEFAULT_CONTAINER, help="container name")
    create.set_defaults(func=_pod_create)
    delete = pod.add_parser("delete", help="delete a pod")
    delete.add_argument("pod", metavar="NAMESPACE/NAME")
    delete.set_defaults(func=_pod_delete)
    pod.add_parser("list", help="list active pods and their devices").set_defaults(func=_pod_list)

    node = groups.add_parser("node", help="the node's device resources").add_subparsers(
        dest="ctl_action", metavar="status", required=True
    )
    node.add_parser("status", help="capacity, allocatable and devices").set_defaults(
        func=_node_status
    )

    plugin = groups.add_parser("plugin", help="in-process plugins' own devices").add_subparsers(
        dest="ctl_action", metavar="status", required=True
    )
    plugin.add_parser("status", help="each plugin's devices and their health").set_defaults(
        func=_plugin_status
    )

    device = groups.add_parser("device", help="devices of in-process plugins").add_subparsers(
        dest="ctl_action", metavar="health|unplug|plug", required=True
    )
    health = device.add_parser("health", help="set a device's health")
    health.add_argument("resource", metavar="RESOURCE")
    health.add_argument("device_id", metavar="DEVICE_ID")
    health.add_argument("health", choices=("Healthy", "Unhealthy"))
    health.set_defaults(func=_device_op, device_op="device.health")
    for action in ("unplug", "plug"):
        sub = device.add_parser(action, help=f"{action} a device")
        sub.add_argument("resource", metavar="RESOURCE")
        sub.add_argument("device_id", metavar="DEVICE_ID")
        sub.set_defaults(func=_device_op, device_op=f"device.{action}")

    dra = groups.add_parser("dra", help="the simulated DRA driver's health stream").add_subparsers(
        dest="ctl_action", metavar="health|status", required=True
    )
    dra_health = dra.add_parser("health", help="set a DRA device's health in the stream")
    dra_health.add_argument("device", metavar="DEVICE", help="device name, e.g. gpu-0")
    dra_health.add_argument("health", choices=tuple(HEALTH_NAMES))
    dra_health.add_argument("--message", default="", help="the driver's message with it")
    dra_health.set_defaults(func=_dra_health)
    dra.add_parser("status", help="every device's health in the stream").set_defaults(
        func=_dra_status
    )


class _UsageError(Exception):
    pass


def _split_pod(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise _UsageError(f"pod must be given as NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _parse_requests(items: list[str]) -> dict[str, int]:
    requests: dict[str, int] = {}
    for item in items:
        resource, sep, count = item.rpartition("=")
        if not sep or not resource or not count.strip().isdigit():
            raise _UsageError(f"--request must be RESOURCE=COUNT, got {item!r}")
        requests[resource] = requests.get(resource, 0) + int(count)
    return requests


def _send(args: argparse.Namespace, request: dict[str, Any]) -> tuple[int, Any]:
    is_dra = str(request["op"]).startswith("dra.")
    socket_path = dra_control_socket_path(args.root) if is_dra else control_socket_path(args.root)
    try:
        return EXIT_OK, call(socket_path, request)
    except ControlUnavailable as e:
        print(f"sim-ctl: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE, None
    except ControlError as e:
        print(f"sim-ctl: refused: {e}", file=sys.stderr)
        return EXIT_REFUSED, None


def _run(args: argparse.Namespace, request: dict[str, Any], render: Any) -> int:
    code, result = _send(args, request)
    if code == EXIT_OK:
        if args.json:
            print(json.dumps(result, indent=2, sort_keys=True))
        else:
            render(result)
    return code


def _numa_label(key: str) -> str:
    # The kubelet files devices without topology under NUMA node -1.
    return "no NUMA" if key == "-1" else f"NUMA {key}"


def _describe_containers(pod: dict[str, Any]) -> None:
    for container in pod["containers"]:
        if not container["devices"]:
            print(f"  {container['name']}: no devices")
        for resource, devices in container["devices"].items():
            numa = "; ".join(f"{_numa_label(k)}: {','.join(v)}" for k, v in devices["numa"].items())
            print(f"  {container['name']}: {resource} {numa}")


def _pod_create(args: argparse.Namespace) -> int:
    try:
        namespace, name = _split_pod(args.pod)
        requests = _parse_requests(args.request)
    except _UsageError as e:
        print(f"sim-ctl: {e}", file=sys.stderr)
        return EXIT_USAGE
    request = {
        "op": "pod.create",
        "namespace": namespace,
        "name": name,
        "containers": [{"name": args.container, "requests": requests}],
    }

    def render(pod: dict[str, Any]) -> None:
        print(f"pod {pod['namespace']}/{pod['name']} admitted uid={pod['uid']}")
        _describe_containers(pod)

    return _run(args, request, render)


def _pod_delete(args: argparse.Namespace) -> int:
    try:
        namespace, name = _split_pod(args.pod)
    except _UsageError as e:
        print(f"sim-ctl: {e}", file=sys.stderr)
        return EXIT_USAGE
    request = {"op": "pod.delete", "namespace": namespace, "name": name}
    return _run(args, request, lambda pod: print(f"pod {namespace}/{name} deleted"))


def _pod_list(args: argparse.Namespace) -> int:
    def render(result: dict[str, Any]) -> None:
        for pod in result["pods"]:
            print(f"{pod['namespace']}/{pod['name']} uid={pod['uid']}")
            _describe_containers(pod)

    return _run(args, {"op": "pod.list"}, render)


def _node_status(args: argparse.Namespace) -> int:
    def render(result: dict[str, Any]) -> None:
        for resource, status in result["resources"].items():
            connected = "connected" if status["plugin_connected"] else "no plugin"
            print(
                f"{resource} capacity={status['capacity']} "
                f"allocatable={status['allocatable']} ({connected})"
            )
            for device in status["devices"]:
                numa = ",".join(str(n) for n in device["numa_nodes"]) or "-"
                print(f"  {device['id']} {device['health']} numa={numa}")

    return _run(args, {"op": "node.status"}, render)


def _plugin_status(args: argparse.Namespace) -> int:
    def render(result: dict[str, Any]) -> None:
        for resource, status in result["plugins"].items():
            print(f"{resource} {len(status['devices'])} devices")
            for device in status["devices"]:
                print(f"  {device['id']} {device['health']}")

    return _run(args, {"op": "plugin.status"}, render)


def _device_op(args: argparse.Namespace) -> int:
    request = {"op": args.device_op, "resource": args.resource, "device_id": args.device_id}
    if args.device_op == "device.health":
        request["health"] = args.health
    done = {
        "device.health": f"health set to {getattr(args, 'health', '')}",
        "device.unplug": "unplugged",
        "device.plug": "plugged",
    }[args.device_op]
    return _run(args, request, lambda _: print(f"{args.resource} {args.device_id}: {done}"))


def _dra_health(args: argparse.Namespace) -> int:
    request = {
        "op": "dra.health",
        "device": args.device,
        "health": args.health,
        "message": args.message,
    }
    return _run(args, request, lambda state: print(f"{args.device}: {state['health']}"))


def _dra_status(args: argparse.Namespace) -> int:
    def render(result: dict[str, Any]) -> None:
        print(f"pool {result['pool']} on {result['socket']}")
        for name, state in result["devices"].items():
            message = f" {state['message']!r}" if state["message"] else ""
            print(f"  {name} {state['health']}{message}")

    return _run(args, {"op": "dra.status"}, render)
