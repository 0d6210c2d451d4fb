"""ORM models. The schema itself changes only through Alembic migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Integer primary keys that autoincrement on SQLite too.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator[datetime]):
    """Timestamps are UTC and timezone-aware in Python whatever the database keeps.

    SQLite has no time zone type and hands back naive values; PostgreSQL keeps timestamptz.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    @property
    def python_type(self) -> type[datetime]:
        return datetime

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; Devicedeck keeps time in UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UtcDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


def partial_index(name: str, *columns: str, where: str) -> Index:
    """An index over the rows that match `where`, on PostgreSQL and SQLite alike."""
    return Index(name, *columns, postgresql_where=text(where), sqlite_where=text(where))


def current_pod_trigram(name: str) -> Index:
    """Pod-name substring search over current holders (pg_trgm, migration 0012); SQLite scans."""
    return Index(
        name,
        "pod",
        postgresql_using="gin",
        postgresql_ops={"pod": "gin_trgm_ops"},
        postgresql_where=text("ended IS NULL"),
    ).ddl_if(dialect="postgresql")


def table_of(model: type[Base]) -> Table:
    """A model's table, for Core statements on hot paths that need no ORM objects."""
    return cast(Table, model.__table__)


class Node(Base):
    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(253), unique=True)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime] = mapped_column(index=True)
    # Set by the stale sweep when the node stops reporting, cleared by its next snapshot.
    stale_since: Mapped[datetime | None]
    # From the Kubernetes API (node status, spec and labels), when the cluster watcher runs.
    capacity: Mapped[dict[str, Any] | None]
    allocatable: Mapped[dict[str, Any] | None]
    labels: Mapped[dict[str, Any] | None]
    conditions: Mapped[list[Any] | None]
    # spec.unschedulable (cordoned) and spec.taints.
    unschedulable: Mapped[bool | None]
    taints: Mapped[list[Any] | None]
    kube_synced_at: Mapped[datetime | None]
    # Per derived resource, the last observation the derived-health rule judged
    # (devicedeck/inventory/write/derived_health.py, `Basis`).
    derived_basis: Mapped[dict[str, Any] | None]


class PluginRegistration(Base):
    __tablename__ = "plugin_registrations"
    __table_args__ = (UniqueConstraint("node_id", "resource"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    resource: Mapped[str] = mapped_column(String(316))
    endpoint: Mapped[str | None] = mapped_column(String(512))
    api_version: Mapped[str | None] = mapped_column(String(32))
    options: Mapped[dict[str, Any] | None]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class NodeResource(Base):
    """Per node and resource: what the kubelet reports as allocatable."""

    __tablename__ = "node_resources"
    __table_args__ = (UniqueConstraint("node_id", "resource"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    resource: Mapped[str] = mapped_column(String(316))
    allocatable_device_ids: Mapped[list[Any]]
    updated_at: Mapped[datetime]


# Percent of each page of devices filled by inserts. A pod starting or ending changes its
# devices' `held`, which no index covers: with room on the row's page the new version goes
# there and no index is touched (a HOT update), where a full page made the database insert an
# entry into each of the table's eleven indexes for every device a pod took.
DEVICES_FILLFACTOR = 80


class Device(Base):
    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint("node_id", "resource", "device_id"),
        Index("ix_devices_resource_health", "resource", "health"),
        Index("ix_devices_device_id", "device_id"),
        # The device list's sorts, each an index order (migration 0006).
        Index("ix_devices_by_node", "node_name", "resource", "device_id", "id"),
        Index("ix_devices_by_resource", "resource", "node_name", "device_id", "id"),
        partial_index(
            "ix_devices_not_healthy",
            "node_name",
            "resource",
            "device_id",
            "id",
            where="state = 'present' AND health <> 'Healthy'",
        ),
        partial_index(
            "ix_devices_removed",
            "removed_at",
            where="state = 'removed'",
        ),
        # The overview's chart window starts at the first device (migration 0013).
        Index("ix_devices_first_seen", "first_seen"),
        # The holder filters check each allocation's device is present (migration 0011).
        partial_index("ix_devices_present_id", "id", where="state = 'present'"),
        # Device-ID substring search (pg_trgm); SQLite scans.
        Index(
            "ix_devices_device_id_trigram",
            "device_id",
            postgresql_using="gin",
            postgresql_ops={"device_id": "gin_trgm_ops"},
        ).ddl_if(dialect="postgresql"),
        # Room in each page for a row's next version (migration 0015).
        {"postgresql_with": {"fillfactor": DEVICES_FILLFACTOR}},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    resource: Mapped[str] = mapped_column(String(316))
    device_id: Mapped[str] = mapped_column(String(253))
    health: Mapped[str] = mapped_column(String(16))
    raw_health: Mapped[str | None] = mapped_column(String(64))
    health_source: Mapped[str] = mapped_column(String(16))
    numa_nodes: Mapped[list[Any]]
    state: Mapped[str] = mapped_column(String(16))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    removed_at: Mapped[datetime | None]
    # Removed although its derived stream still lists it: the Node's status counts fewer
    # devices than the kubelet's lists show (devicedeck/inventory/write/derived_health.py).
    removed_by_capacity: Mapped[bool] = mapped_column(server_default=false())
    # Present as far as anyone can tell, but maybe removed: the kubelet does not offer it and
    # the Node's counts cannot say whether it is the unhealthy one or one that went.
    presence_uncertain: Mapped[bool] = mapped_column(server_default=false())
    health_changed_at: Mapped[datetime | None]
    # Current allocations of this device; kept by triggers on allocations (migration 0005).
    held: Mapped[int] = mapped_column(Integer, server_default="0")
    # The node's name, set by a trigger on insert (migration 0006): the list sorts by it.
    node_name: Mapped[str] = mapped_column(String(253), server_default="")
    # Times it turned Unhealthy from any other health; kept by a trigger (migration 0019).
    unhealthy_transitions: Mapped[int] = mapped_column(Integer, server_default="0")


class DeviceCount(Base):
    """Present devices of one node and resource by health and holder, kept by triggers on
    devices in the writer's own transaction (migration 0005), so totals cost no aggregation
    over devices. Health here is what was reported; a stale node's devices read Unknown."""

    __tablename__ = "device_counts"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True
    )
    resource: Mapped[str] = mapped_column(String(316), primary_key=True)
    devices: Mapped[int] = mapped_column(Integer, server_default="0")
    healthy: Mapped[int] = mapped_column(Integer, server_default="0")
    unhealthy: Mapped[int] = mapped_column(Integer, server_default="0")
    unknown: Mapped[int] = mapped_column(Integer, server_default="0")
    allocated: Mapped[int] = mapped_column(Integer, server_default="0")
    free: Mapped[int] = mapped_column(Integer, server_default="0")
    # Times its devices turned Unhealthy, removed devices' included (migration 0019).
    unhealthy_transitions: Mapped[int] = mapped_column(Integer, server_default="0")


class Allocation(Base):
    """A device held by a container for an interval; the current one has no end."""

    __tablename__ = "allocations"
    __table_args__ = (
        Index("ix_allocations_device_started", "device_pk", "started"),
        partial_index(
            "ix_allocations_current_node",
            "node_id",
            where="ended IS NULL",
        ),
        partial_index(
            "ix_allocations_current_device",
            "device_pk",
            where="ended IS NULL",
        ),
        Index("ix_allocations_namespace_pod", "namespace", "pod"),
        # The pods list walks current holders in name order (migration 0006).
        partial_index("ix_allocations_current_pod", "namespace", "pod", where="ended IS NULL"),
        current_pod_trigram("ix_allocations_current_pod_trigram"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    device_pk: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    namespace: Mapped[str] = mapped_column(String(63))
    pod: Mapped[str] = mapped_column(String(253))
    pod_uid: Mapped[str | None] = mapped_column(String(64))
    container: Mapped[str] = mapped_column(String(253))
    resource: Mapped[str] = mapped_column(String(316))
    device_id: Mapped[str] = mapped_column(String(253))
    started: Mapped[datetime]
    ended: Mapped[datetime | None]


class DeviceIncident(Base):
    """A spell of a device reported Unhealthy (kind `unhealthy`) or removed (kind `removed`):
    open while `ended` is None. Kept by a trigger on the change log (migration 0017), in the
    transaction of the event that starts or ends it, whoever writes it."""

    __tablename__ = "device_incidents"
    __table_args__ = (
        Index("ix_device_incidents_device_started", "device_pk", "started"),
        Index("ix_device_incidents_started", "started"),
        Index(
            "ix_device_incidents_open",
            "device_pk",
            "kind",
            unique=True,
            postgresql_where=text("ended IS NULL"),
            sqlite_where=text("ended IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    device_pk: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    started: Mapped[datetime]
    ended: Mapped[datetime | None]
    # The device's node and resource, from the event: the ranking filters and groups by them
    # without reading the devices.
    node: Mapped[str | None] = mapped_column(String(253))
    resource: Mapped[str | None] = mapped_column(String(316))


class ClaimAllocation(Base):
    """A DRA device held by a container through a ResourceClaim, as PodResources reports it."""

    __tablename__ = "claim_allocations"
    __table_args__ = (
        partial_index(
            "ix_claim_allocations_current_node",
            "node_id",
            where="ended IS NULL",
        ),
        Index("ix_claim_allocations_namespace_pod", "namespace", "pod"),
        # The pods list walks current holders in name order (migration 0006).
        partial_index(
            "ix_claim_allocations_current_pod", "namespace", "pod", where="ended IS NULL"
        ),
        current_pod_trigram("ix_claim_allocations_current_pod_trigram"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    namespace: Mapped[str] = mapped_column(String(63))
    pod: Mapped[str] = mapped_column(String(253))
    container: Mapped[str] = mapped_column(String(253))
    claim_namespace: Mapped[str] = mapped_column(String(63))
    claim_name: Mapped[str] = mapped_column(String(253))
    driver: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str] = mapped_column(String(253))
    device: Mapped[str] = mapped_column(String(253))
    share_id: Mapped[str | None] = mapped_column(String(253))
    cdi_devices: Mapped[list[Any]]
    started: Mapped[datetime]
    ended: Mapped[datetime | None]


class Event(Base):
    """The change log. Written in the same transaction as the change it describes."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_node_id", "node", "id"),
        Index("ix_events_kind_id", "kind", "id"),
        Index("ix_events_resource_id", "resource", "id"),
        Index("ix_events_device_pk_id", "device_pk", "id"),
        Index("ix_events_at", "at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    node: Mapped[str | None] = mapped_column(String(253))
    resource: Mapped[str | None] = mapped_column(String(316))
    device_id: Mapped[str | None] = mapped_column(String(253))
    device_pk: Mapped[int | None] = mapped_column(BigId)
    namespace: Mapped[str | None] = mapped_column(String(63))
    pod: Mapped[str | None] = mapped_column(String(253))
    container: Mapped[str | None] = mapped_column(String(253))
    before: Mapped[dict[str, Any] | None]
    after: Mapped[dict[str, Any] | None]
    actor: Mapped[str] = mapped_column(String(253))


class IngestReceipt(Base):
    """The last snapshot applied for each stream: where ordering and idempotency are decided."""

    __tablename__ = "ingest_receipts"
    __table_args__ = (UniqueConstraint("node_id", "stream"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    stream: Mapped[str] = mapped_column(String(400))
    boot_id: Mapped[str] = mapped_column(String(128))
    seq: Mapped[int] = mapped_column(BigInteger)
    # Hash of the snapshot as received; a repeat of the same seq must carry the same hash.
    payload_hash: Mapped[str] = mapped_column(String(64))
    # Hash of the content last applied; None when another writer changed the same rows since.
    content_hash: Mapped[str | None] = mapped_column(String(64))
    received_at: Mapped[datetime]
    observed_at: Mapped[datetime | None]
    # When the sending agent's boot began, as it says; orders the stream's boots. None: not
    # sent (an older agent), and then any other boot follows this one.
    boot_started_at: Mapped[datetime | None]


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]]
    # An ingest token writes one node's snapshots, or, deliberately, any node's.
    node: Mapped[str | None] = mapped_column(String(253))
    all_nodes: Mapped[bool] = mapped_column(server_default=false())
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class DashboardSession(Base):
    """A dashboard sign-in: the browser's cookie holds a random id, kept here only hashed.

    It lasts while its token is not revoked, it is used within the idle timeout, it is
    younger than the maximum age, and nobody signed out."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    id_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]


class Setting(Base):
    """Small key/value state the service keeps, e.g. the cluster watcher's status."""

    __tablename__ = "service_state"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime]


class Notification(Base):
    """One alert transition (firing or resolved) owed to one webhook target: the outbox.

    Written in the transaction of the event that causes it, so a notification exists exactly
    when its change committed; sent later, and marked, by the leader's sender."""

    __tablename__ = "notification_outbox"
    __table_args__ = (
        # The sender walks a target's pending rows in order.
        partial_index("ix_notification_outbox_pending", "target", "id", where="state = 'pending'"),
        # A resolved alert takes its labels and start from the firing one.
        Index("ix_notification_outbox_fingerprint_id", "fingerprint", "id"),
        Index("ix_notification_outbox_done_at", "done_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    created_at: Mapped[datetime]
    # A hash of the webhook URL, which may hold a credential and is not stored.
    target: Mapped[str] = mapped_column(String(64))
    dedupe_key: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]]
    annotations: Mapped[dict[str, Any]]
    generator_url: Mapped[str | None] = mapped_column(String(2048))
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime | None]
    # pending, delivered, or rejected (the receiver refused it for good, a 4xx).
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    last_error: Mapped[str | None] = mapped_column(String(500))
    done_at: Mapped[datetime | None]


class WatchMark(Base):
    """A device marked for return: who marked it, when, and why (migration 0019). It goes
    with the device's row; a device whose node is deleted leaves the watch list."""

    __tablename__ = "watchlist"
    __table_args__ = (Index("ix_watchlist_marked_at", "marked_at"),)

    device_pk: Mapped[int] = mapped_column(
        BigId, ForeignKey("devices.id", ondelete="CASCADE"), primary_key=True
    )
    marked_by: Mapped[str] = mapped_column(String(253))
    marked_at: Mapped[datetime]
    note: Mapped[str | None] = mapped_column(String(500))


# The cluster tables (filled by the cluster watcher) live in their own module; importing it keeps
# Base.metadata complete for Alembic, the schema check and the tests' TRUNCATE.
from devicedeck.inventory.cluster import models as _cluster_models  # noqa: E402,F401
