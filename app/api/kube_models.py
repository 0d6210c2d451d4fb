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
    share_id: str | None
    consumers: list[DraConsumerOut]


class DraDeviceOut(BaseModel):
    id: int
    driver: str
    pool: str
    device: str
    node: str | None
    slice: str
    pool_generation: int
    attributes: dict[str, Any]
    capacity: dict[str, Any]
    taints: list[Any]
    allocated: bool
    claims: list[DraClaimRefOut]
    updated_at: str | None


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


class KubePodOut(BaseModel):
    uid: str
    namespace: str
    name: str
    node: str | None
    phase: str | None
    owner: OwnerOut | None
    labels: dict[str, Any]
    requests: dict[str, int]
    claims: list[str]
    resource_health: dict[str, dict[str, str]]
    devices: list[HeldDeviceOut]
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
