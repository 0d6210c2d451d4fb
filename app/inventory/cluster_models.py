"""Tables filled from the Kubernetes API by app/kube: pods that request devices, DRA objects.

Registered on the inventory's Base (app/inventory/models.py imports this module at its end), so
Base.metadata always holds every table: Alembic, the tests' TRUNCATE and the schema check agree.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.inventory.models import Base, BigId


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
    # The node the device is reachable from; None for slices with a node selector or allNodes.
    node: Mapped[str | None] = mapped_column(String(253))
    attributes: Mapped[dict[str, Any]]
    capacity: Mapped[dict[str, Any]]
    taints: Mapped[list[Any]]
    updated_at: Mapped[datetime]


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
