"""DRA objects with the fields the allocation, pool and health tests need, as served by v1."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"


def device(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def slice_object(
    name: str,
    devices: list[dict[str, Any]],
    *,
    pool: str,
    generation: int = 1,
    count: int = 1,
    driver: str = DRIVER,
    **where: Any,
) -> dict[str, Any]:
    """`where`: nodeName=..., allNodes=True, nodeSelector={...} or perDeviceNodeSelection=True."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        **where,
    }
    if devices:
        spec["devices"] = devices
    return {"metadata": {"name": name}, "spec": spec}


def result(
    device_name: str, *, pool: str, request: str = "gpu", driver: str = DRIVER, **extra: Any
) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device_name, **extra}


def claim_object(
    namespace: str,
    name: str,
    results: list[dict[str, Any]],
    *,
    reserved_for: list[tuple[str, str]] = (),  # type: ignore[assignment]
    devices_status: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {"devices": {"results": results}}
    if reserved_for:
        status["reservedFor"] = [
            {"resource": "pods", "name": pod, "uid": uid} for pod, uid in reserved_for
        ]
    if devices_status:
        status["devices"] = devices_status
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }


def selector(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}


def dra_pod(
    namespace: str,
    name: str,
    *,
    node_name: str,
    uid: str,
    claims: list[dict[str, Any]],
    generated: dict[str, str] | None = None,
    health: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A pod with spec.resourceClaims; `generated`: reference name -> the claim made from its
    template (status.resourceClaimStatuses); `health`: allocatedResourcesStatus of "main"."""
    status: dict[str, Any] = {"phase": "Running"}
    if generated:
        status["resourceClaimStatuses"] = [
            {"name": ref, "resourceClaimName": claim} for ref, claim in generated.items()
        ]
    if health:
        status["containerStatuses"] = [
            {
                "name": "main",
                "ready": True,
                "allocatedResourcesStatus": [
                    {
                        "name": entry,
                        "resources": [{"resourceID": i, "health": h} for i, h in ids.items()],
                    }
                    for entry, ids in health.items()
                ],
            }
        ]
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "labels": {}},
        "spec": {
            "nodeName": node_name,
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                }
            ],
        },
        "status": status,
    }
