"""Snapshot bodies in the shapes the ingest API takes, built from what the kubelet answered.

Bodies use the kubelet's own proto3-JSON names (podResources, deviceIds, resourceName, ID),
with every list in a fixed order: the kubelet builds its answers from Go maps, so the same
state can come back in another order, and the agent must not mistake that for a change.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devicedeck.kubelet.checkpoint import NO_TOPOLOGY_NUMA_NODE, Checkpoint
from devicedeck.kubelet.podresources import to_json
from devicedeck.kubelet.proto import deviceplugin_pb2, podresources_pb2

PODRESOURCES_STREAM = "podresources"
PODRESOURCES_PATH = "/api/v1/ingest/podresources"
LISTANDWATCH_PATH = "/api/v1/ingest/listandwatch"
DRA_HEALTH_PATH = "/api/v1/ingest/dra-health"
DRA_HEALTH_STREAM_PREFIX = "dra-health/"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# (resource, device ID) -> NUMA nodes
NumaMap = dict[tuple[str, str], set[int]]


def listandwatch_stream(resource: str) -> str:
    return f"listandwatch/{resource}"


def dra_health_stream(driver: str) -> str:
    return f"{DRA_HEALTH_STREAM_PREFIX}{driver}"


@dataclass(frozen=True)
class Snapshot:
    """One stream's full state. `key` identifies the content: equal keys, nothing to send."""

    stream: str
    path: str
    body: dict[str, Any]
    key: str
    observed_at: datetime

    @property
    def kind(self) -> str:
        if self.stream.startswith(DRA_HEALTH_STREAM_PREFIX):
            return "dra-health"
        return "podresources" if self.stream == PODRESOURCES_STREAM else "listandwatch"

    def payload(self, source: Mapping[str, object]) -> dict[str, Any]:
        return {**self.body, "source": dict(source), "observed_at": self.observed_at.isoformat()}


def _content_key(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _entry_order(entry: Mapping[str, Any]) -> tuple[str, list[str], list[int]]:
    nodes = entry.get("topology", {}).get("nodes", [])
    return (
        entry.get("resourceName", ""),
        entry.get("deviceIds", []),
        [int(n["ID"]) for n in nodes],
    )


def _sorted_entries(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return sorted((dict(e) for e in entries), key=_entry_order)


def _pod_json(pod: podresources_pb2.PodResources, uid: str | None) -> dict[str, Any]:
    # Zero values must be printed: NUMA node 0 would otherwise come out as `{}`.
    body = to_json(pod, include_defaults=True)
    # CPU and memory assignments are left out: the service does not use them, and they
    # would make a CPU-manager rebalance look like a device change.
    containers = [
        {
            "name": container.get("name", ""),
            "devices": _sorted_entries(container.get("devices", [])),
            "dynamicResources": container.get("dynamicResources", []),
        }
        for container in body.get("containers", [])
    ]
    result: dict[str, Any] = {
        "name": body.get("name", ""),
        "namespace": body.get("namespace", ""),
        "containers": containers,
    }
    if uid:
        result["uid"] = uid
    return result


ContainerKey = tuple[str, str, frozenset[str]]  # container name, resource, device IDs


def match_pod_uids(
    pods: podresources_pb2.ListPodResourcesResponse, checkpoint: Checkpoint | None
) -> dict[tuple[str, str], str]:
    """Pod UIDs from the checkpoint, which has UIDs but no pod names, matched to List's pods,
    which have names but no UIDs, by (container name, resource, device set).

    A pod gets a UID only when every container holding devices points at the same single
    UID; pods without devices, or matching ambiguously (entries of a deleted pod linger in
    the checkpoint until the kubelet's next write), get none.
    """
    if checkpoint is None:
        return {}
    by_key: dict[ContainerKey, set[str]] = defaultdict(set)
    for entry in checkpoint.entries:
        key = (entry.container_name, entry.resource_name, frozenset(entry.all_device_ids()))
        by_key[key].add(entry.pod_uid)
    uids: dict[tuple[str, str], str] = {}
    for pod in pods.pod_resources:
        candidates: set[str] | None = None
        for container in pod.containers:
            held: dict[str, set[str]] = defaultdict(set)
            for devices in container.devices:
                held[devices.resource_name].update(devices.device_ids)
            for resource, ids in held.items():
                found = by_key.get((container.name, resource, frozenset(ids)), set())
                candidates = set(found) if candidates is None else candidates & found
        if candidates is not None and len(candidates) == 1:
            uids[(pod.namespace, pod.name)] = next(iter(candidates))
    return uids


def podresources_snapshot(
    node: str,
    pods: podresources_pb2.ListPodResourcesResponse,
    allocatable: podresources_pb2.AllocatableResourcesResponse | None,
    checkpoint: Checkpoint | None,
    observed_at: datetime,
) -> Snapshot:
    uids = match_pod_uids(pods, checkpoint)
    pod_bodies = sorted(
        (_pod_json(p, uids.get((p.namespace, p.name))) for p in pods.pod_resources),
        key=lambda p: (p["namespace"], p["name"]),
    )
    body: dict[str, Any] = {"node": node, "podResources": pod_bodies}
    if allocatable is not None:
        devices = to_json(allocatable, include_defaults=True).get("devices", [])
        body["allocatable"] = {"devices": _sorted_entries(devices)}
    return Snapshot(PODRESOURCES_STREAM, PODRESOURCES_PATH, body, _content_key(body), observed_at)


def device_json(device_id: str, health: str, numa: Iterable[int]) -> dict[str, Any]:
    device: dict[str, Any] = {"ID": device_id, "health": health}
    nodes = sorted(set(numa))
    if nodes:
        device["topology"] = {"nodes": [{"ID": n} for n in nodes]}
    return device


def listandwatch_snapshot(
    node: str,
    resource: str,
    devices: Iterable[Mapping[str, Any]],
    *,
    health_source: str,
    observed_at: datetime,
    plugin: Mapping[str, Any] | None = None,
) -> Snapshot:
    body: dict[str, Any] = {
        "node": node,
        "resource": resource,
        "health_source": health_source,
        "devices": sorted((dict(d) for d in devices), key=lambda d: str(d["ID"])),
    }
    if plugin is not None:
        body["plugin"] = dict(plugin)
    return Snapshot(
        listandwatch_stream(resource), LISTANDWATCH_PATH, body, _content_key(body), observed_at
    )


def plugin_devices(response: deviceplugin_pb2.ListAndWatchResponse) -> list[dict[str, Any]]:
    """A plugin's ListAndWatch message as device dicts, NUMA ids as numbers."""
    return [device_json(d.ID, d.health, (n.ID for n in d.topology.nodes)) for d in response.devices]


# ---- reading device sets out of kubelet answers ------------------------------------------


def devices_by_resource(
    entries: Iterable[podresources_pb2.ContainerDevices], numa: NumaMap | None = None
) -> dict[str, set[str]]:
    """Device IDs per resource; NUMA nodes are collected into `numa` on the way."""
    result: dict[str, set[str]] = defaultdict(set)
    for entry in entries:
        for device_id in entry.device_ids:
            result[entry.resource_name].add(device_id)
            if numa is not None:
                numa[(entry.resource_name, device_id)].update(n.ID for n in entry.topology.nodes)
    return result


def allocated_entries(
    pods: podresources_pb2.ListPodResourcesResponse,
) -> list[podresources_pb2.ContainerDevices]:
    return [d for p in pods.pod_resources for c in p.containers for d in c.devices]


def checkpoint_numa(checkpoint: Checkpoint, numa: NumaMap) -> None:
    for entry in checkpoint.entries:
        for node, ids in entry.device_ids.items():
            for device_id in ids:
                slot = numa[(entry.resource_name, device_id)]
                if node != NO_TOPOLOGY_NUMA_NODE:
                    slot.add(node)


def dra_health_snapshot(
    node: str, driver: str, devices: list[dict[str, Any]], observed_at: datetime
) -> Snapshot:
    """One NodeWatchResources message of one driver (entries from dra_health.device_entries)."""
    body = {"node": node, "driver": driver, "devices": devices}
    return Snapshot(
        stream=dra_health_stream(driver),
        path=DRA_HEALTH_PATH,
        body=body,
        key=_content_key(body),
        observed_at=observed_at,
    )
