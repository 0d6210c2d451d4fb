"""Reading the truth from the simulators' control sockets, and the service's answer from its
API."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from devicedeck.sim.kubelet.control import ControlError, call, control_socket_path
from devicedeck.truth.model import ApiDevice, ApiView, DeviceKey, Truth, TruthDevice

CONTROL_TIMEOUT_SECONDS = 10.0
API_TIMEOUT_SECONDS = 20.0
PAGE_SIZE = 1000


class Unanswered(Exception):
    """The service did not answer (restarting, or overloaded beyond the timeout)."""


def read_node(
    root: Path,
) -> tuple[dict[tuple[str, str], TruthDevice], dict[tuple[str, str], set[str]]]:
    """One node's plugins' own devices and the pods holding devices, by (resource, id).
    Raises ControlError when the node does not answer."""
    socket_path = control_socket_path(root)
    plugins = call(socket_path, {"op": "plugin.status"}, timeout=CONTROL_TIMEOUT_SECONDS)
    pods = call(socket_path, {"op": "pod.list"}, timeout=CONTROL_TIMEOUT_SECONDS)
    devices = {
        (resource, device["id"]): TruthDevice(device["health"])
        for resource, status in plugins["plugins"].items()
        for device in status["devices"]
    }
    holders: dict[tuple[str, str], set[str]] = {}
    for pod in pods["pods"]:
        name = f"{pod['namespace']}/{pod['name']}"
        for container in pod["containers"]:
            for resource, assigned in container["devices"].items():
                for device_id in assigned["device_ids"]:
                    holders.setdefault((resource, device_id), set()).add(name)
    return devices, holders


def read_truth(
    roots: Mapping[str, Path], skip: set[str], derived: frozenset[tuple[str, str]]
) -> tuple[Truth, set[str]]:
    """The truth of every node not in `skip` that answers; also the nodes that did not."""
    nodes: set[str] = set()
    silent: set[str] = set()
    devices: dict[DeviceKey, TruthDevice] = {}
    holders: dict[DeviceKey, frozenset[str]] = {}
    for node, root in roots.items():
        if node in skip:
            silent.add(node)
            continue
        try:
            node_devices, node_holders = read_node(root)
        except (ControlError, OSError, ValueError):
            silent.add(node)
            continue
        nodes.add(node)
        for (resource, device_id), device in node_devices.items():
            devices[DeviceKey(node, resource, device_id)] = device
        for (resource, device_id), pods in node_holders.items():
            holders[DeviceKey(node, resource, device_id)] = frozenset(pods)
    return Truth(frozenset(nodes), devices, holders, derived), silent


def get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=API_TIMEOUT_SECONDS) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise Unanswered(f"{url}: {e}") from e


def pages(base_url: str, path: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """Every item of a list route, page after page."""
    query = urllib.parse.urlencode({**params, "limit": str(PAGE_SIZE)})
    url: str | None = f"{base_url}{path}?{query}"
    while url:
        page = get_json(url)
        yield from page["results"]
        following = page.get("next")
        url = urllib.parse.urljoin(base_url, following) if following else None


def read_api(base_url: str) -> ApiView:
    """The service's devices (present and removed) and the pods it says hold them now."""
    devices = {
        DeviceKey(d["node"], d["resource"], d["device_id"]): ApiDevice(
            d["state"] == "present", d["health"], d.get("health_detail")
        )
        for d in pages(base_url, "/api/v1/devices", {"state": "any"})
    }
    holders: dict[DeviceKey, set[str]] = {}
    # The pods list also keeps finished pods, with the holds they ended: only running pods'
    # current holds are holders now.
    for pod in pages(base_url, "/api/v1/pods", {"state": "running"}):
        name = f"{pod['namespace']}/{pod['name']}"
        for container in pod["containers"]:
            for device in container["devices"]:
                if device.get("ended") is not None:
                    continue
                key = DeviceKey(pod["node"], device["resource"], device["device_id"])
                holders.setdefault(key, set()).add(name)
    return ApiView(devices, {k: frozenset(v) for k, v in holders.items()})


def node_last_seen(base_url: str, node: str) -> float | None:
    """When the service last heard from the node's agent (a snapshot or a heartbeat)."""
    seen = get_json(f"{base_url}/api/v1/nodes/{urllib.parse.quote(node)}").get("last_seen")
    return datetime.fromisoformat(seen.replace("Z", "+00:00")).timestamp() if seen else None


def read_events(base_url: str, since: str) -> list[dict[str, Any]]:
    """The change log's device removals and health changes since the run began."""
    found: list[dict[str, Any]] = []
    for kind in ("device_removed", "health_changed"):
        found.extend(pages(base_url, "/api/v1/events", {"kind": kind, "since": since}))
    return found
