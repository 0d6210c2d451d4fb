"""Response shapes of the query API, for the OpenAPI schema and its clients."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from app.api.kube_models import DraDeviceOut, ExtendedResourceOut


class Counts(BaseModel):
    devices: int
    healthy: int
    unhealthy: int
    unknown: int
    allocated: int
    free: int


class AllocationOut(BaseModel):
    namespace: str
    pod: str
    container: str
    pod_uid: str | None
    started: str | None


class DeviceOut(BaseModel):
    id: int
    node: str
    resource: str
    device_id: str
    health: str
    raw_health: str | None
    health_source: str
    state: str
    numa_nodes: list[int]
    first_seen: str | None
    last_seen: str | None
    removed_at: str | None
    health_changed_at: str | None
    node_stale: bool
    allocation: AllocationOut | None


class HealthPoint(BaseModel):
    at: str | None
    kind: str
    health: str | None
    raw_health: str | None
    state: str | None
    actor: str


class AllocationPeriod(BaseModel):
    namespace: str
    pod: str
    pod_uid: str | None
    container: str
    started: str | None
    ended: str | None


class DeviceDetailOut(DeviceOut):
    health_history: list[HealthPoint]
    allocation_history: list[AllocationPeriod]


class NodeOut(BaseModel):
    name: str
    first_seen: str | None
    last_seen: str | None
    stale: bool
    resources: dict[str, Counts]


class PluginOut(BaseModel):
    resource: str
    endpoint: str | None
    api_version: str | None
    options: dict[str, Any] | None
    first_seen: str | None
    last_seen: str | None


class NodeDetailOut(NodeOut):
    plugins: list[PluginOut]
    kubelet_allocatable: dict[str, list[str]]
    capacity: dict[str, Any]
    allocatable: dict[str, Any]
    labels: dict[str, Any]
    conditions: list[Any]
    kube_synced_at: str | None
    extended_resources: list[ExtendedResourceOut] = []
    manual_extended_resources: list[ExtendedResourceOut] = []
    dra_devices: list[DraDeviceOut] = []


class PodDeviceOut(BaseModel):
    id: int
    resource: str
    device_id: str
    health: str
    numa_nodes: list[int]
    started: str | None


class PodClaimOut(BaseModel):
    claim: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    cdi_devices: list[str]
    started: str | None


class ContainerOut(BaseModel):
    name: str
    devices: list[PodDeviceOut]
    claims: list[PodClaimOut]


class PodOut(BaseModel):
    namespace: str
    name: str
    uid: str | None
    node: str
    nodes: list[str]
    containers: list[ContainerOut]


class HealthSpanOut(BaseModel):
    health: str
    since: str
    until: str


class PodHoldOut(PodDeviceOut):
    node: str
    pod_uid: str | None
    ended: str | None
    health_during: list[HealthSpanOut] = Field(
        description="the device's health from `started` until `ended` (or now)"
    )
    unhealthy_while_held: bool


class PodClaimHoldOut(PodClaimOut):
    ended: str | None


class PodContainerHistoryOut(BaseModel):
    name: str
    devices: list[PodHoldOut]
    claims: list[PodClaimHoldOut]


class PodDetailOut(BaseModel):
    namespace: str
    name: str
    uid: str | None
    uids: list[str]
    node: str
    nodes: list[str]
    running: bool
    started: str
    ended: str | None
    unhealthy_while_held: bool
    history_truncated: bool
    containers: list[PodContainerHistoryOut]


class ResourceTotals(Counts):
    nodes: int


class ResourceOut(BaseModel):
    """Cluster-wide totals; per-node counts: `GET /api/v1/nodes?resource=NAME`."""

    resource: str
    totals: ResourceTotals


class EventOut(BaseModel):
    id: int
    at: str | None
    kind: str
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
    field: str
    rule: str
    message: str


class ErrorInfo(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail]


class ErrorOut(BaseModel):
    error: ErrorInfo


# For the routes that take a JSON body.
NOT_JSON: dict[int | str, dict[str, Any]] = {
    415: {"model": ErrorOut, "description": "the body was not sent as application/json"},
}
