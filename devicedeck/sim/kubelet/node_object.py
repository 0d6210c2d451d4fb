"""What the simulated kubelet says about its Node: labels, addresses, system info and the
conditions a kubelet posts (Ready and the three pressure conditions)."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

NATIVE_RESOURCES = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
SIM_LABEL = "devicedeck.dev/simulated"
KUBELET_VERSION = "v1.34.0"
KUBELET_PORT = 10250
# (type, reason, message) of the conditions a healthy kubelet posts, in the kubelet's order.
PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
CONDITION_ORDER = [{"type": t} for t, _, _ in PRESSURE_CONDITIONS] + [{"type": "Ready"}]


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(since: str) -> list[dict[str, Any]]:
    """The node's conditions, all well: no pressure, and Ready since the kubelet started."""
    heartbeat = now_text()
    found = [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        }
        for kind, reason, message in PRESSURE_CONDITIONS
    ]
    found.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": heartbeat,
            "lastTransitionTime": since,
        }
    )
    return found


def _os_image() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", "Linux")
    except OSError:
        return "Linux"


def _runtime() -> str:
    try:
        return f"devicedeck-sim://{version('devicedeck')}"
    except PackageNotFoundError:
        return "devicedeck-sim://unknown"


def node_info(boot_id: str) -> dict[str, Any]:
    """The simulated kubelet runs on this machine: its kernel and operating system are the
    machine's; the container runtime is the simulator."""
    return {
        "kubeletVersion": KUBELET_VERSION,
        "operatingSystem": "linux",
        "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(
            platform.machine(), platform.machine()
        ),
        "kernelVersion": platform.release(),
        "osImage": _os_image(),
        "containerRuntimeVersion": _runtime(),
        "bootID": boot_id,
    }


def addresses(node_name: str) -> list[dict[str, str]]:
    # Every simulated node runs on this machine, reached on its loopback address.
    return [
        {"type": "InternalIP", "address": "127.0.0.1"},
        {"type": "Hostname", "address": node_name},
    ]


def node_object(node_name: str, ready_since: str, boot_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": {
                "kubernetes.io/hostname": node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": node_info(boot_id)["architecture"],
                SIM_LABEL: "true",
            },
        },
        "status": {
            "capacity": dict(NATIVE_RESOURCES),
            "allocatable": dict(NATIVE_RESOURCES),
            "conditions": conditions(ready_since),
            "addresses": addresses(node_name),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "nodeInfo": node_info(boot_id),
        },
    }
