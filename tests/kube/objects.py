"""Kubernetes objects as the API server serves them (plain JSON), for the fake's collections."""

from __future__ import annotations

from typing import Any


def node(
    name: str,
    capacity: dict[str, str],
    allocatable: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    ready: str = "True",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", **capacity},
            "allocatable": {"cpu": "8", "memory": "31Gi", **(allocatable or capacity)},
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-12-01T10:00:00Z",
                    "lastTransitionTime": "2026-12-01T09:00:00Z",
                }
            ],
        },
    }


def pod(
    namespace: str,
    name: str,
    *,
    node_name: str | None,
    limits: dict[str, str] | None = None,
    uid: str | None = None,
    phase: str = "Running",
    owner: tuple[str, str] | None = ("ReplicaSet", "trainer-5d8f"),
    labels: dict[str, str] | None = None,
    health: dict[str, dict[str, str]] | None = None,
    claims: list[str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "labels": labels or {"app": "trainer"},
    }
    if uid:
        metadata["uid"] = uid
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True}
        ]
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "trainer:1", "resources": {"limits": limits or {}}}
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    status: dict[str, Any] = {"phase": phase}
    if health is not None:
        status["containerStatuses"] = [
            {
                "name": "main",
                "ready": True,
                "allocatedResourcesStatus": [
                    {
                        "name": resource,
                        "resources": [
                            {"resourceID": device_id, "health": value}
                            for device_id, value in devices.items()
                        ],
                    }
                    for resource, devices in health.items()
                ],
            }
        ]
    return {"metadata": metadata, "spec": spec, "status": status}


def resource_slice(
    name: str,
    *,
    driver: str,
    pool: str,
    generation: int,
    node_name: str | None,
    devices: list[str],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
        "devices": [
            {
                "name": device,
                "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "index": {"int": i}},
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for i, device in enumerate(devices)
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["allNodes"] = True
    return {"metadata": {"name": name}, "spec": spec}


def resource_claim(
    namespace: str,
    name: str,
    *,
    driver: str,
    pool: str,
    devices: list[str],
    reserved_for: list[tuple[str, str]],
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": driver, "pool": pool, "device": d} for d in devices
                ]
            },
            "nodeSelector": {"nodeSelectorTerms": []},
        }
    if reserved_for:
        status["reservedFor"] = [
            {"resource": "pods", "name": pod_name, "uid": uid} for pod_name, uid in reserved_for
        ]
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }
