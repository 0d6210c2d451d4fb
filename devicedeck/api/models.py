"""Response shapes of the query API, for the OpenAPI schema and its clients."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from devicedeck.api.examples import AT, EARLIER, example, example_of
from devicedeck.api.kube_models import DraDeviceOut, ExtendedResourceOut, OwnerOut, PodDraDeviceOut
from devicedeck.api.node_kube_models import NodeKubeStateOut
from devicedeck.api.vocabulary import DevicePresence, DeviceState, Health
from devicedeck.inventory.events import EventKind


class Counts(BaseModel):
    model_config = example(
        {"devices": 8, "healthy": 7, "unhealthy": 1, "unknown": 0, "allocated": 5, "free": 2}
    )

    devices: int
    healthy: int
    unhealthy: int
    unknown: int
    allocated: int
    free: int


class AllocationOut(BaseModel):
    model_config = example(
        {
            "namespace": "ml",
            "pod": "trainer-0",
            "container": "main",
            "pod_uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "started": EARLIER,
        }
    )

    namespace: str
    pod: str
    container: str
    pod_uid: str | None
    started: str | None


class DeviceOut(BaseModel):
    model_config = example(
        {
            "id": 17,
            "node": "gpu-node-1",
            "resource": "nvidia.com/gpu",
            "device_id": "GPU-4b3c2d1e",
            "health": "Healthy",
            "raw_health": "Healthy",
            "health_source": "plugin",
            "health_detail": None,
            "state": "present",
            "presence": "present",
            "numa_nodes": [0],
            "first_seen": EARLIER,
            "last_seen": AT,
            "removed_at": None,
            "health_changed_at": None,
            "node_stale": False,
            "allocation": example_of(AllocationOut),
        }
    )

    id: int
    node: str
    resource: str
    device_id: str
    health: Health = Field(description="Unknown while the node is stale")
    raw_health: str | None
    health_source: str
    health_detail: str | None = Field(
        description="Why a device whose health is derived reads Unhealthy (not offered by the "
        "kubelet; what the Node's status counts, or that without it the device may be unhealthy "
        "or removed), or was removed by the Node's capacity; null otherwise"
    )
    state: DeviceState
    presence: DevicePresence = Field(
        description="present, removed, or unhealthy_or_removed: a device whose health is "
        "derived, not offered by the kubelet, when the Node's counts cannot say whether it is "
        "the unhealthy one or one that went (its row stays present)"
    )
    numa_nodes: list[int]
    first_seen: str | None
    last_seen: str | None
    removed_at: str | None
    health_changed_at: str | None
    node_stale: bool
    allocation: AllocationOut | None


class HealthPoint(BaseModel):
    model_config = example(
        {
            "at": AT,
            "kind": "health_changed",
            "health": "Unhealthy",
            "raw_health": "Unhealthy",
            "state": "present",
            "actor": "agent-gpu-node-1@gpu-node-1",
        }
    )

    at: str | None
    kind: EventKind
    health: str | None
    raw_health: str | None
    state: str | None
    actor: str


class AllocationPeriod(BaseModel):
    model_config = example({**example_of(AllocationOut), "ended": AT})

    namespace: str
    pod: str
    pod_uid: str | None
    container: str
    started: str | None
    ended: str | None


class DeviceDetailOut(DeviceOut):
    model_config = example(
        {
            **example_of(DeviceOut),
            "health_history": [example_of(HealthPoint)],
            "allocation_history": [example_of(AllocationPeriod)],
        }
    )

    health_history: list[HealthPoint]
    allocation_history: list[AllocationPeriod]


class NodeOut(BaseModel):
    model_config = example(
        {
            "name": "gpu-node-1",
            "first_seen": EARLIER,
            "last_seen": AT,
            "stale": False,
            "resources": {"nvidia.com/gpu": example_of(Counts)},
            "kubernetes": example_of(NodeKubeStateOut),
        }
    )

    name: str
    first_seen: str | None
    last_seen: str | None
    stale: bool
    resources: dict[str, Counts]
    kubernetes: NodeKubeStateOut | None = Field(
        description="the node's state in Kubernetes (Ready, cordoned, trouble, taints); null "
        "while the service does not read the cluster (DEVICEDECK_KUBE) or has not seen the node"
    )


class PluginOut(BaseModel):
    model_config = example(
        {
            "resource": "nvidia.com/gpu",
            "endpoint": "nvidia-gpu.sock",
            "api_version": "v1beta1",
            "options": {"pre_start_required": False, "get_preferred_allocation_available": True},
            "first_seen": EARLIER,
            "last_seen": AT,
        }
    )

    resource: str
    endpoint: str | None
    api_version: str | None
    options: dict[str, Any] | None
    first_seen: str | None
    last_seen: str | None


class UndecidedDevicesOut(BaseModel):
    model_config = example(
        {
            "resource": "example.com/dongle",
            "unhealthy": 1,
            "removed": 1,
            "among": ["dongle-4", "dongle-5"],
        }
    )

    resource: str
    unhealthy: int
    removed: int
    among: list[str]


class NodeDetailOut(NodeOut):
    model_config = example(
        {
            **example_of(NodeOut),
            "plugins": [example_of(PluginOut)],
            "kubelet_allocatable": {"nvidia.com/gpu": ["GPU-4b3c2d1e"]},
            "capacity": {"cpu": "32", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "31", "nvidia.com/gpu": "7"},
            "labels": {"kubernetes.io/hostname": "gpu-node-1"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "kube_synced_at": AT,
            "extended_resources": [example_of(ExtendedResourceOut)],
            "manual_extended_resources": [],
            "dra_devices": [],
        }
    )

    plugins: list[PluginOut]
    kubelet_allocatable: dict[str, list[str]]
    capacity: dict[str, Any]
    allocatable: dict[str, Any]
    labels: dict[str, Any]
    conditions: list[Any]
    kube_synced_at: str | None
    undecided_devices: list[UndecidedDevicesOut] = Field(
        default=[],
        description="per resource whose health is derived: devices the kubelet does not offer "
        "that the Node's counts cannot tell unhealthy from removed, with how many are which",
    )
    extended_resources: list[ExtendedResourceOut] = []
    manual_extended_resources: list[ExtendedResourceOut] = []
    dra_devices: list[DraDeviceOut] = []


class PodDeviceOut(BaseModel):
    model_config = example(
        {
            "id": 17,
            "resource": "nvidia.com/gpu",
            "device_id": "GPU-4b3c2d1e",
            "health": "Healthy",
            "numa_nodes": [0],
            "started": EARLIER,
        }
    )

    id: int
    resource: str
    device_id: str
    health: Health
    numa_nodes: list[int]
    started: str | None
    ended: str | None = None


class PodClaimOut(BaseModel):
    model_config = example(
        {
            "claim": "trainer-0-gpu",
            "driver": "gpu.example.com",
            "pool": "gpu-node-1",
            "device": "gpu-3",
            "share_id": None,
            "cdi_devices": ["gpu.example.com/gpu=gpu-3"],
            "started": EARLIER,
        }
    )

    claim: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    cdi_devices: list[str]
    started: str | None
    ended: str | None = None


class ContainerOut(BaseModel):
    model_config = example(
        {"name": "main", "devices": [example_of(PodDeviceOut)], "claims": [example_of(PodClaimOut)]}
    )

    name: str
    devices: list[PodDeviceOut]
    claims: list[PodClaimOut]


class PodOut(BaseModel):
    model_config = example(
        {
            "namespace": "ml",
            "name": "trainer-0",
            "uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "node": "gpu-node-1",
            "nodes": ["gpu-node-1"],
            "running": True,
            "started": EARLIER,
            "ended": None,
            "owner": {"kind": "Job", "name": "trainer"},
            "containers": [example_of(ContainerOut)],
            "dra_devices": [],
        }
    )

    namespace: str
    name: str
    uid: str | None
    node: str
    nodes: list[str]
    running: bool = Field(description="holds a device now")
    started: str = Field(description="when its latest hold started")
    ended: str | None = Field(description="a finished pod's last release")
    owner: OwnerOut | None = Field(
        description="the pod's controlling owner from its ownerReferences, when the cluster "
        "integration knows the pod"
    )
    containers: list[ContainerOut] = Field(
        description="a running pod's current holds; a finished pod's holds up to its last release"
    )
    dra_devices: list[PodDraDeviceOut] = Field(
        description="devices a running pod holds through ResourceClaims that no node agent "
        "reported, as the API server allocated them"
    )


class HealthSpanOut(BaseModel):
    model_config = example({"health": "Healthy", "since": EARLIER, "until": AT})

    health: str
    since: str
    until: str


class PodHoldOut(PodDeviceOut):
    model_config = example(
        {
            **example_of(PodDeviceOut),
            "node": "gpu-node-1",
            "pod_uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "ended": None,
            "health_during": [example_of(HealthSpanOut)],
            "unhealthy_while_held": False,
        }
    )

    node: str
    pod_uid: str | None
    ended: str | None
    health_during: list[HealthSpanOut] = Field(
        description="the device's health from `started` until `ended` (or now)"
    )
    unhealthy_while_held: bool


class PodClaimHoldOut(PodClaimOut):
    model_config = example({**example_of(PodClaimOut), "ended": None})

    ended: str | None


class PodContainerHistoryOut(BaseModel):
    model_config = example(
        {
            "name": "main",
            "devices": [example_of(PodHoldOut)],
            "claims": [example_of(PodClaimHoldOut)],
        }
    )

    name: str
    devices: list[PodHoldOut]
    claims: list[PodClaimHoldOut]


class PodDraHoldOut(PodDraDeviceOut):
    """A device a pod holds through a ResourceClaim as the API server allocated it, where no
    node agent reported the claim."""

    model_config = example(
        {
            **example_of(PodDraDeviceOut),
            "started": EARLIER,
            "ended": None,
            "health_during": [example_of(HealthSpanOut)],
            "unhealthy_while_held": True,
        }
    )

    started: str
    ended: str | None
    health_during: list[HealthSpanOut]
    unhealthy_while_held: bool


class PodDetailOut(BaseModel):
    model_config = example(
        {
            "namespace": "ml",
            "name": "trainer-0",
            "uid": "9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d",
            "uids": ["9f1c2d3e-0000-4a5b-8c6d-7e8f9a0b1c2d"],
            "node": "gpu-node-1",
            "nodes": ["gpu-node-1"],
            "running": True,
            "started": EARLIER,
            "ended": None,
            "owner": {"kind": "Job", "name": "trainer"},
            "unhealthy_while_held": False,
            "history_truncated": False,
            "containers": [example_of(PodContainerHistoryOut)],
            "dra_holds": [],
        }
    )

    namespace: str
    name: str
    uid: str | None
    uids: list[str]
    node: str
    nodes: list[str]
    running: bool
    started: str
    ended: str | None
    owner: OwnerOut | None = Field(
        description="the pod's controlling owner from its ownerReferences, when the cluster "
        "integration knows the pod"
    )
    unhealthy_while_held: bool
    history_truncated: bool
    containers: list[PodContainerHistoryOut]
    dra_holds: list[PodDraHoldOut] = Field(
        description="devices held through ResourceClaims that no node agent reported, as the "
        "API server allocated them"
    )


class ResourceTotals(Counts):
    model_config = example({**example_of(Counts), "nodes": 2})

    nodes: int


class ResourceOut(BaseModel):
    """Cluster-wide totals; per-node counts: `GET /api/v1/nodes?resource=NAME`."""

    model_config = example({"resource": "nvidia.com/gpu", "totals": example_of(ResourceTotals)})

    resource: str
    totals: ResourceTotals


class EventOut(BaseModel):
    model_config = example(
        {
            "id": 1042,
            "at": AT,
            "kind": "health_changed",
            "node": "gpu-node-1",
            "resource": "nvidia.com/gpu",
            "device_id": "GPU-4b3c2d1e",
            "device": 17,
            "namespace": None,
            "pod": None,
            "container": None,
            "before": {"health": "Healthy", "raw_health": "Healthy"},
            "after": {"health": "Unhealthy", "raw_health": "Unhealthy"},
            "actor": "agent-gpu-node-1@gpu-node-1",
        }
    )

    id: int
    at: str | None
    kind: EventKind
    node: str | None
    resource: str | None
    device_id: str | None
    device: int | None
    namespace: str | None
    pod: str | None
    container: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    actor: str


class ErrorDetail(BaseModel):
    model_config = example(
        {"field": "health", "rule": "enum", "message": "must be one of Healthy, Unhealthy, Unknown"}
    )

    field: str
    rule: str
    message: str


class ErrorInfo(BaseModel):
    model_config = example(
        {
            "code": "invalid_input",
            "message": "health must be one of Healthy, Unhealthy, Unknown",
            "details": [example_of(ErrorDetail)],
        }
    )

    code: str
    message: str
    details: list[ErrorDetail]


class ErrorOut(BaseModel):
    model_config = example({"error": example_of(ErrorInfo)})

    error: ErrorInfo


# For the routes that take a JSON body.
NOT_JSON: dict[int | str, dict[str, Any]] = {
    415: {"model": ErrorOut, "description": "the body was not sent as application/json"},
}
