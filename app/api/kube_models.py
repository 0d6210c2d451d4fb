"""Request and response shapes of the cluster routes (and the node detail's cluster fields)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.kube.extended_admin import MAX_QUANTITY


class ExtendedResourceOut(BaseModel):
    resource: str
    source: str = Field(description="device_plugin, or manual (advertised by hand)")
    capacity: int | None
    allocatable: int | None
    unavailable: int | None = Field(description="capacity - allocatable: unhealthy or lost")
    devices: int = Field(description="devices of this resource present in the inventory")
    healthy_devices: int
    degraded: bool
    problem: str | None


class DraConsumerOut(BaseModel):
    namespace: str
    name: str | None
    uid: str | None
    resource: str | None


class DraClaimRefOut(BaseModel):
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
    value: str | None
    request_policy: dict[str, Any] | None
    consumed: str | None = Field(None, description="shared devices: consumed by all shares")
    available: str | None = Field(None, description="shared devices: what is left")


class DraPoolStateOut(BaseModel):
    generation: int
    slices: int = Field(description="slices of the newest generation the API server has")
    slice_count: int = Field(description="resourceSliceCount: slices the pool should have")
    complete: bool


class DraHealthOut(BaseModel):
    health: str = Field(description="Healthy or Unhealthy")
    raw_health: str
    source: str = Field(description="pod_status (KEP-4680) or claim_status (device conditions)")
    reported_by: str | None = Field(description="the pod or claim that reported it")
    message: str | None
    changed_at: str | None


class DraDeviceOut(BaseModel):
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
    at: str | None
    node: str | None
    health: str | None
    raw_health: str | None
    source: str | None
    reported_by: str | None
    message: str | None
    before: str | None = Field(description="the health before this report")


class DraAllocationOut(BaseModel):
    node: str
    namespace: str
    pod: str
    container: str
    claim: str
    share_id: str | None
    started: str | None
    ended: str | None


class DraDeviceDetailOut(BaseModel):
    driver: str
    pool: str
    device: str
    published: bool = Field(description="the pool's newest generation lists the device")
    current: DraDeviceOut | None
    health: DraHealthOut | None
    health_history: list[DraHealthEventOut] = Field(description="newest first")
    allocation_history: list[DraAllocationOut] = Field(
        description="containers that held it, as PodResources reported, newest first"
    )


class WatchStatusOut(BaseModel):
    model_config = ConfigDict(extra="allow")

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
    mode: str = Field(description="DEVICEDECK_KUBE: off, incluster or kubeconfig")
    enabled: bool
    healthy: bool | None
    problem: str | None
    watches: list[WatchStatusOut]


class OwnerOut(BaseModel):
    kind: str | None
    name: str | None


class HeldDeviceOut(BaseModel):
    id: int
    container: str
    resource: str
    device_id: str
    started: str | None


class PodClaimOut(BaseModel):
    name: str = Field(description="the reference name the pod's containers use")
    claim: str | None = Field(
        description="the ResourceClaim; for a template claim the generated one, once it exists"
    )
    template: str | None
    shared_with: list[str] = Field(
        [], description="other pods the claim is reserved for (a claim shared by pods)"
    )


class PodDraDeviceOut(BaseModel):
    claim: str
    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    admin_access: bool
    health: str | None


class KubePodOut(BaseModel):
    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str | None
    owner: OwnerOut | None
    labels: dict[str, Any]
    requests: dict[str, int]
    claims: list[PodClaimOut]
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
    node: str
    resource: str
    quantity: int | None
    capacity: str | None = Field(description="the node's status.capacity entry after the change")
    allocatable: str | None = Field(
        description="status.allocatable; the kubelet copies capacity here shortly after"
    )
    patch: list[dict[str, Any]] = Field(description="the JSON Patch sent to the API server")
    actor: str
