"""Tables filled from the Kubernetes API by devicedeck/kube: pods that request devices, DRA objects.

Registered on the inventory's Base (inventory/models.py imports this module at its end), so
Base.metadata always holds every table: Alembic, the tests' TRUNCATE and the schema check agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from devicedeck.inventory.models import Base, BigId


class KubePod(Base):
    """A pod that requests extended resources or DRA claims, as the API server shows it."""

    __tablename__ = "kube_pods"
    __table_args__ = (
        Index("ix_kube_pods_namespace_name", "namespace", "name"),
        Index("ix_kube_pods_node", "node"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(253))
    node: Mapped[str | None] = mapped_column(String(253))
    phase: Mapped[str | None] = mapped_column(String(32))
    owner_kind: Mapped[str | None] = mapped_column(String(63))
    owner_name: Mapped[str | None] = mapped_column(String(253))
    labels: Mapped[dict[str, Any]]
    # Extended resource name -> quantity the pod needs (limits, as the kubelet reads them).
    requests: Mapped[dict[str, Any]]
    claims: Mapped[list[Any]]
    # allocatedResourcesStatus (KEP-4680): resource name -> device ID -> health.
    resource_health: Mapped[dict[str, Any]]
    created_at: Mapped[datetime | None]
    first_seen: Mapped[datetime]
    updated_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]


class DraDevice(Base):
    """One device of one ResourceSlice; identity is (driver, pool, device)."""

    __tablename__ = "dra_devices"
    __table_args__ = (
        UniqueConstraint("slice_name", "device"),
        Index("ix_dra_devices_driver_pool_device", "driver", "pool", "device"),
        Index("ix_dra_devices_node", "node"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    slice_name: Mapped[str] = mapped_column(String(253))
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    pool_generation: Mapped[int] = mapped_column(BigInteger)
    device: Mapped[str] = mapped_column(String(253))
    # Where the device can be used: one node, every node, or the nodes a selector picks
    # (spec.nodeName/allNodes/nodeSelector of the slice, or of the device itself when the
    # slice has perDeviceNodeSelection).
    node: Mapped[str | None] = mapped_column(String(253))
    all_nodes: Mapped[bool] = mapped_column(server_default=false())
    node_selector: Mapped[dict[str, Any] | None]
    attributes: Mapped[dict[str, Any]]
    # name -> {"value": quantity, "request_policy": {...} or None}
    capacity: Mapped[dict[str, Any]]
    taints: Mapped[list[Any]]
    # allowMultipleAllocations: several claims may hold shares of it, each consuming capacity.
    allow_multiple: Mapped[bool] = mapped_column(server_default=false())
    updated_at: Mapped[datetime]


class DraSlice(Base):
    """One ResourceSlice, kept even when it lists no device: a pool's newest generation and
    its completeness are decided per slice."""

    __tablename__ = "dra_slices"
    __table_args__ = (Index("ix_dra_slices_driver_pool", "driver", "pool"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    generation: Mapped[int] = mapped_column(BigInteger)
    # resourceSliceCount: how many slices the pool has at this generation.
    slice_count: Mapped[int] = mapped_column(BigInteger)
    node: Mapped[str | None] = mapped_column(String(253))
    devices: Mapped[int]
    updated_at: Mapped[datetime]


class DraDeviceHealth(Base):
    """The current health of a DRA device and where it came from. Kept apart from dra_devices,
    whose rows come and go with the driver's slices; the history is in events."""

    __tablename__ = "dra_device_health"
    __table_args__ = (UniqueConstraint("driver", "pool", "device"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    device: Mapped[str] = mapped_column(String(253))
    node: Mapped[str | None] = mapped_column(String(253))
    health: Mapped[str] = mapped_column(String(32))
    raw_health: Mapped[str] = mapped_column(String(253))
    # pod_status (KEP-4680 allocatedResourcesStatus) or claim_status (status.devices).
    health_source: Mapped[str] = mapped_column(String(32))
    # Who reported it: the pod or the claim, "namespace/name".
    reported_by: Mapped[str | None] = mapped_column(String(320))
    message: Mapped[str | None] = mapped_column(String(1024))
    changed_at: Mapped[datetime]


class DraHealthReport(Base):
    """The latest state a driver's DRA health stream (NodeWatchResources, read by the node
    agent) gave for a device. Kept apart from dra_device_health, which holds the latest report
    of any source: a stream repeating itself must not undo a newer report from another source,
    so only a change of the stream's own value is applied there."""

    __tablename__ = "dra_health_reports"
    __table_args__ = (UniqueConstraint("driver", "pool", "device"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    device: Mapped[str] = mapped_column(String(253))
    # The node whose agent reported it.
    node: Mapped[str] = mapped_column(String(253))
    # Healthy, Unhealthy or Unknown (the driver cannot tell).
    health: Mapped[str] = mapped_column(String(32))
    # When the driver last determined it (the stream's last_updated_time); None if not sent.
    checked_at: Mapped[datetime | None]
    # The driver's health-check timeout; None when it leaves it to the kubelet's default.
    timeout_seconds: Mapped[int | None] = mapped_column(BigInteger)
    message: Mapped[str | None] = mapped_column(String(1024))
    received_at: Mapped[datetime]


class DraClaim(Base):
    """A ResourceClaim: what was allocated to it and which pods consume it."""

    __tablename__ = "dra_claims"
    __table_args__ = (Index("ix_dra_claims_namespace_name", "namespace", "name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    uid: Mapped[str] = mapped_column(String(64), unique=True)
    namespace: Mapped[str] = mapped_column(String(63))
    name: Mapped[str] = mapped_column(String(253))
    allocated: Mapped[bool]
    # status.reservedFor: [{"resource", "name", "uid"}], the consuming pods.
    reserved_for: Mapped[list[Any]]
    updated_at: Mapped[datetime]


class DraClaimDevice(Base):
    """One allocation result of a claim: the device it got, for joining to dra_devices."""

    __tablename__ = "dra_claim_devices"
    __table_args__ = (
        Index("ix_dra_claim_devices_driver_pool_device", "driver", "pool", "device"),
        Index("ix_dra_claim_devices_claim_id", "claim_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    claim_id: Mapped[int] = mapped_column(ForeignKey("dra_claims.id", ondelete="CASCADE"))
    request: Mapped[str] = mapped_column(String(253))
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    device: Mapped[str] = mapped_column(String(253))
    share_id: Mapped[str | None] = mapped_column(String(253))
    # adminAccess results give access for monitoring; the scheduler does not count them as
    # allocating the device.
    admin_access: Mapped[bool] = mapped_column(server_default=false())
    consumed_capacity: Mapped[dict[str, Any] | None]
    # status.devices[].conditions the driver reported for this device of the claim.
    conditions: Mapped[list[Any] | None]
