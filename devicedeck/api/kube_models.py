"""Request and response shapes of the cluster routes (and the node detail's cluster fields)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from devicedeck.api.examples import AT, EARLIER, example, example_of
from devicedeck.api.vocabulary import DraHealthSource, ExtendedSource, KubeModeName, ReportedHealth
from devicedeck.kube.extended_admin import MAX_QUANTITY

DRIVER = "gpu.example.com"
NODE = "gpu-node-1"


class ExtendedResourceOut(BaseModel):
    model_config = example(
        {
            "resource": "nvidia.com/gpu",
            "source": "device_plugin",
            "capacity": 8,
            "allocatable": 7,
            "unavailable": 1,
            "devices": 8,
            "healthy_devices": 7,
            "degraded": True,
            "problem": "1 of 8 not allocatable (unhealthy or lost)",
        }
    )

    resource: str
    source: ExtendedSource = Field(description="device_plugin, or manual (advertised by hand)")
    capacity: int | None
    allocatable: int | None
    unavailable: int | None = Field(description="capacity - allocatable: unhealthy or lost")
    devices: int = Field(description="devices of this resource present in the inventory")
    healthy_devices: int
    degraded: bool
    problem: str | None


class DraConsumerOut(BaseModel):
    model_config = example(
        {
            "namespace": "ml",
            "name": "trainer-0",
            "uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "resource": "pods",
        }
    )

    namespace: str
    name: str | None
    uid: str | None
    resource: str | None


class DraClaimRefOut(BaseModel):
    model_config = example(
        {
            "namespace": "ml",
            "name": "trainer-0-gpu",
            "uid": "0b6a1f52-1111-4c2d-9e8f-a1b2c3d4e5f6",
            "request": "gpu",
            "share_id": None,
            "admin_access": False,
            "consumed_capacity": None,
            "conditions": [{"type": "Ready", "status": "True"}],
            "consumers": [example_of(DraConsumerOut)],
        }
    )

    namespace: str
    name: str
    uid: str
    request: str
    share_id: str | None = Field(description="which share of a shared device this claim holds")
    admin_access: bool = Field(description="monitoring access: does not allocate the device")
    consumed_capacity: dict[str, str] | None
    conditions: list[dict[str, Any]] = Field(
        description="status.devices[].conditions the driver reported for this device"
    )
    consumers: list[DraConsumerOut]


class DraCapacityOut(BaseModel):
    model_config = example(
        {"value": "80Gi", "request_policy": None, "consumed": None, "available": None}
    )

    value: str | None
    request_policy: dict[str, Any] | None
    consumed: str | None = Field(None, description="shared devices: consumed by all shares")
    available: str | None = Field(None, description="shared devices: what is left")


class DraPoolStateOut(BaseModel):
    model_config = example({"generation": 3, "slices": 1, "slice_count": 1, "complete": True})

    generation: int
    slices: int = Field(description="slices of the newest generation the API server has")
    slice_count: int = Field(description="resourceSliceCount: slices the pool should have")
    complete: bool


class DraHealthOut(BaseModel):
    model_config = example(
        {
            "health": "Healthy",
            "raw_health": "Healthy",
            "source": "pod_status",
            "reported_by": "ml/trainer-0",
            "message": None,
            "changed_at": EARLIER,
        }
    )

    health: ReportedHealth = Field(
        description="Healthy or Unhealthy; Unknown when the driver's health stream says so"
    )
    raw_health: str
    source: DraHealthSource = Field(
        description="pod_status (KEP-4680), claim_status (device conditions) or "
        "kubelet_dra_health (the driver's DRAResourceHealth stream, read by the node agent)"
    )
    reported_by: str | None = Field(
        description="the pod or claim that reported it; for the health stream, the node"
    )
    message: str | None
    changed_at: str | None


class DraDeviceOut(BaseModel):
    model_config = example(
        {
            "id": 5,
            "driver": DRIVER,
            "pool": NODE,
            "device": "gpu-3",
            "node": NODE,
            "all_nodes": False,
            "node_selector": None,
            "nodes": [NODE],
            "slice": "gpu-node-1-gpu.example.com-x7k2p",
            "pool_generation": 3,
            "pool_state": example_of(DraPoolStateOut),
            "attributes": {"model": {"string": "A100"}},
            "capacity": {"memory": example_of(DraCapacityOut)},
            "taints": [],
            "shared": False,
            "allocated": True,
            "claims": [example_of(DraClaimRefOut)],
            "watched_by": [],
            "health": example_of(DraHealthOut),
            "updated_at": AT,
        }
    )

    id: int
    driver: str
    pool: str
    device: str
    node: str | None = Field(description="the one node the device is on, if it is on one")
    all_nodes: bool
    node_selector: dict[str, Any] | None
    nodes: list[str] = Field(description="known nodes the device can serve (allNodes: none)")
    slice: str
    pool_generation: int
    pool_state: DraPoolStateOut | None
    attributes: dict[str, Any]
    capacity: dict[str, DraCapacityOut]
    taints: list[Any]
    shared: bool = Field(description="allowMultipleAllocations: claims hold shares of it")
    allocated: bool = Field(description="held by a claim without adminAccess")
    claims: list[DraClaimRefOut] = Field(description="claims holding it (each share)")
    watched_by: list[DraClaimRefOut] = Field(description="adminAccess claims")
    health: DraHealthOut | None
    updated_at: str | None


class DraHealthEventOut(BaseModel):
    model_config = example(
        {
            "at": AT,
            "node": NODE,
            "health": "Unhealthy",
            "raw_health": "Unhealthy",
            "source": "pod_status",
            "reported_by": "ml/trainer-0",
            "message": "XID 79",
            "before": "Healthy",
        }
    )

    at: str | None
    node: str | None
    health: str | None
    raw_health: str | None
    source: str | None
    reported_by: str | None
    message: str | None
    before: str | None = Field(description="the health before this report")


class DraHealthStreamOut(BaseModel):
    model_config = example(
        {
            "node": NODE,
            "health": "Unhealthy",
            "checked_at": EARLIER,
            "timeout_seconds": 60,
            "message": "Xid 79",
            "received_at": EARLIER,
        }
    )

    node: str = Field(description="the node whose agent read the driver's stream")
    health: str = Field(description="Healthy, Unhealthy or Unknown, as the stream gave it last")
    checked_at: str | None = Field(description="when the driver last determined it")
    timeout_seconds: int | None = Field(
        description="the driver's health-check timeout; null: the kubelet's default"
    )
    message: str | None
    received_at: str | None


class DraAllocationOut(BaseModel):
    model_config = example(
        {
            "node": NODE,
            "namespace": "ml",
            "pod": "trainer-0",
            "container": "main",
            "claim": "trainer-0-gpu",
            "share_id": None,
            "started": EARLIER,
            "ended": None,
        }
    )

    node: str
    namespace: str
    pod: str
    container: str
    claim: str
    share_id: str | None
    started: str | None
    ended: str | None


class DraDeviceDetailOut(BaseModel):
    model_config = example(
        {
            "driver": DRIVER,
            "pool": NODE,
            "device": "gpu-3",
            "published": True,
            "current": example_of(DraDeviceOut),
            "health": example_of(DraHealthOut),
            "health_stream": example_of(DraHealthStreamOut),
            "health_history": [example_of(DraHealthEventOut)],
            "allocation_history": [example_of(DraAllocationOut)],
        }
    )

    driver: str
    pool: str
    device: str
    published: bool = Field(description="the pool's newest generation lists the device")
    current: DraDeviceOut | None
    health: DraHealthOut | None
    health_stream: DraHealthStreamOut | None = Field(
        description="the last state of the driver's DRA health stream, when an agent reads it"
    )
    health_history: list[DraHealthEventOut] = Field(description="newest first")
    allocation_history: list[DraAllocationOut] = Field(
        description="containers that held it, as PodResources reported, newest first"
    )


class WatchStatusOut(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "resource": "pods",
                    "state": "watching",
                    "message": None,
                    "resource_version": "184467",
                    "last_list_at": EARLIER,
                    "last_event_at": AT,
                    "lists": 1,
                    "events": 312,
                    "errors": 0,
                    "retry_at": None,
                    "instance": "devicedeck-7d9c5-abcde",
                    "updated_at": AT,
                    "stale": False,
                }
            ]
        },
    )

    resource: str
    state: str
    message: str | None = None
    resource_version: str | None = None
    last_list_at: str | None = None
    last_event_at: str | None = None
    lists: int | None = None
    events: int | None = None
    errors: int | None = None
    retry_at: str | None = None
    instance: str | None = None
    updated_at: str | None
    stale: bool


class ClusterStatusOut(BaseModel):
    model_config = example(
        {
            "mode": "incluster",
            "enabled": True,
            "healthy": True,
            "problem": None,
            "watches": [example_of(WatchStatusOut)],
        }
    )

    mode: KubeModeName = Field(description="DEVICEDECK_KUBE: off, incluster or kubeconfig")
    enabled: bool
    healthy: bool | None
    problem: str | None
    watches: list[WatchStatusOut]


class OwnerOut(BaseModel):
    model_config = example({"kind": "Job", "name": "trainer"})

    kind: str | None
    name: str | None


class HeldDeviceOut(BaseModel):
    model_config = example(
        {
            "id": 17,
            "container": "main",
            "resource": "nvidia.com/gpu",
            "device_id": "GPU-4b3c2d1e",
            "started": EARLIER,
        }
    )

    id: int
    container: str
    resource: str
    device_id: str
    started: str | None


class KubePodClaimOut(BaseModel):
    model_config = example(
        {"name": "gpu", "claim": "trainer-0-gpu", "template": "gpu-template", "shared_with": []}
    )

    name: str = Field(description="the reference name the pod's containers use")
    claim: str | None = Field(
        description="the ResourceClaim; for a template claim the generated one, once it exists"
    )
    template: str | None
    shared_with: list[str] = Field(
        [], description="other pods the claim is reserved for (a claim shared by pods)"
    )


class PodDraDeviceOut(BaseModel):
    model_config = example(
        {
            "claim": "trainer-0-gpu",
            "request": "gpu",
            "driver": DRIVER,
            "pool": NODE,
            "device": "gpu-3",
            "share_id": None,
            "admin_access": False,
            "health": "Healthy",
        }
    )

    claim: str
    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    admin_access: bool
    health: ReportedHealth | None = Field(description="null: no health reported")


class KubePodOut(BaseModel):
    model_config = example(
        {
            "uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "namespace": "ml",
            "name": "trainer-0",
            "node": NODE,
            "phase": "Running",
            "owner": example_of(OwnerOut),
            "labels": {"app": "trainer"},
            "requests": {"nvidia.com/gpu": 1},
            "claims": [example_of(KubePodClaimOut)],
            "resource_health": {"nvidia.com/gpu": {"GPU-4b3c2d1e": "Healthy"}},
            "devices": [example_of(HeldDeviceOut)],
            "dra_devices": [example_of(PodDraDeviceOut)],
            "created_at": EARLIER,
            "first_seen": EARLIER,
            "updated_at": AT,
            "deleted_at": None,
        }
    )

    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str | None
    owner: OwnerOut | None
    labels: dict[str, Any]
    requests: dict[str, int]
    claims: list[KubePodClaimOut]
    resource_health: dict[str, dict[str, str]]
    devices: list[HeldDeviceOut]
    dra_devices: list[PodDraDeviceOut] = Field(
        description="devices allocated to the pod's ResourceClaims"
    )
    created_at: str | None
    first_seen: str | None
    updated_at: str | None
    deleted_at: str | None


class ExtendedResourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quantity: StrictInt = Field(ge=0, le=MAX_QUANTITY, description="a non-negative integer")


class ExtendedResourceChangeOut(BaseModel):
    model_config = example(
        {
            "node": NODE,
            "resource": "example.com/dongle",
            "quantity": 4,
            "capacity": "4",
            "allocatable": None,
            "patch": [
                {
                    "op": "add",
                    "path": "/status/capacity/example.com~1dongle",
                    "value": "4",
                }
            ],
            "actor": "admin-token",
        }
    )

    node: str
    resource: str
    quantity: int | None
    capacity: str | None = Field(description="the node's status.capacity entry after the change")
    allocatable: str | None = Field(
        description="status.allocatable; the kubelet copies capacity here shortly after"
    )
    patch: list[dict[str, Any]] = Field(description="the JSON Patch sent to the API server")
    actor: str
