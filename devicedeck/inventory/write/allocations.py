"""The PodResources stream's device-plugin side: a node's current allocations, as intervals,
and the node's allocatable device sets.

A snapshot replaces the node's current allocations: ones it no longer lists end, new ones start.
Other writers end allocations only through `release_pod`, which keeps the stream's receipt
consistent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Table,
    any_,
    bindparam,
    delete,
    exists,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from devicedeck.inventory.events import EventLog
from devicedeck.inventory.fields import PRESENT, UNKNOWN
from devicedeck.inventory.models import Allocation, ClaimAllocation, Device, NodeResource, table_of
from devicedeck.inventory.schemas import PodResourcesSnapshot
from devicedeck.inventory.write.bulk import BulkInsert, BulkInsertReturning
from devicedeck.inventory.write.node_limits import check_device_total
from devicedeck.inventory.write.receipts import forget_content_hashes, listandwatch_stream

AllocationKey = tuple[str, str, str, str, str]  # namespace, pod, container, resource, device ID


def wanted_allocations(
    snapshot: PodResourcesSnapshot,
) -> tuple[set[AllocationKey], dict[tuple[str, str], set[int]], dict[tuple[str, str], str]]:
    """Allocations the snapshot lists, de-duplicated: the kubelet lists a device once per NUMA
    node it sits on, so (resource, device ID) repeats and the NUMA nodes are merged."""
    wanted: set[AllocationKey] = set()
    numa: dict[tuple[str, str], set[int]] = defaultdict(set)
    uids: dict[tuple[str, str], str] = {}
    for pod in snapshot.pod_resources:
        if pod.uid:
            uids[(pod.namespace, pod.name)] = pod.uid
        for container in pod.containers:
            for entry in container.devices:
                ids = entry.topology.numa_ids() if entry.topology else []
                for device_id in entry.device_ids:
                    wanted.add(
                        (pod.namespace, pod.name, container.name, entry.resource_name, device_id)
                    )
                    numa[(entry.resource_name, device_id)].update(ids)
    return wanted, numa, uids


def allocatable_sets(snapshot: PodResourcesSnapshot) -> dict[str, set[str]] | None:
    if snapshot.allocatable is None:
        return None
    sets: dict[str, set[str]] = defaultdict(set)
    for entry in snapshot.allocatable.devices:
        sets[entry.resource_name].update(entry.device_ids)
    return sets


class PodsListed(NamedTuple):
    """What a PodResources snapshot lists, as replacing the node's holdings needs it; the
    `resources` of the devices it names, whose rows are read."""

    wanted: set[AllocationKey]
    numa_hints: dict[tuple[str, str], set[int]]
    uids: dict[tuple[str, str], str]
    allocatable: dict[str, set[str]] | None
    referenced: set[tuple[str, str]]
    resources: set[str]

    def changes(
        self, node_id: int, holdings: NodeHoldings, now: datetime, *, max_node_devices: int | None
    ) -> AllocationChanges:
        """`allocation_changes` of what is listed, against the node's `holdings`."""
        return allocation_changes(
            node_id,
            self.referenced,
            self.numa_hints,
            holdings,
            self.wanted,
            self.uids,
            now,
            max_node_devices=max_node_devices,
        )


def pods_listed(snapshot: PodResourcesSnapshot) -> PodsListed:
    wanted, numa_hints, uids = wanted_allocations(snapshot)
    allocatable = allocatable_sets(snapshot)
    referenced = referenced_devices(wanted, allocatable)
    resources = {resource for resource, _ in referenced}
    return PodsListed(wanted, numa_hints, uids, allocatable, referenced, resources)


class HeldDevice(NamedTuple):
    """What an allocation needs of its device."""

    pk: int
    health: str


def on_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


class CurrentAllocation(NamedTuple):
    """An allocation of the node that has not ended, as a snapshot replaces it."""

    id: int
    namespace: str
    pod: str
    pod_uid: str | None
    container: str
    resource: str
    device_id: str
    device_pk: int
    started: datetime


@dataclass
class NodeHoldings:
    """What a PodResources snapshot replaces: the node's devices of the resources it names
    (removed ones too) by (resource, device ID), how many devices the node has present (of
    every resource, for the per-node limit), its current allocations by AllocationKey, and
    whether it holds DRA claims now (None: not known, the node has no device to carry the
    answer)."""

    devices: dict[tuple[str, str], HeldDevice]
    present: int
    allocations: dict[AllocationKey, CurrentAllocation]
    claims_open: bool | None = None


# Two single-table reads, each by its node index (the statement-at-a-time path; PostgreSQL reads all
# in one statement, devicedeck/inventory/write/allocations_postgresql.py). One read joining devices
# to their open allocations was tried: psycopg prepares a statement after a few runs, and the
# generic plan PostgreSQL made for the join while the tables had no statistics yet (a new database
# filling up) scanned every open allocation of the fleet for each device, 150 ms a snapshot.
_devices = table_of(Device)
_claims = table_of(ClaimAllocation)
_NODE_DEVICES = select(
    _devices.c.id,
    _devices.c.resource,
    _devices.c.device_id,
    _devices.c.health,
    _devices.c.state,
    exists()
    .where(_claims.c.node_id == bindparam("node_id"), _claims.c.ended.is_(None))
    .label("claims_open"),
).where(
    _devices.c.node_id == bindparam("node_id"),
    or_(
        _devices.c.resource.in_(bindparam("resources", expanding=True)),
        _devices.c.state == PRESENT,
    ),
)
_allocations = table_of(Allocation)
_CURRENT_ALLOCATIONS = select(
    _allocations.c.id,
    _allocations.c.namespace,
    _allocations.c.pod,
    _allocations.c.pod_uid,
    _allocations.c.container,
    _allocations.c.resource,
    _allocations.c.device_id,
    _allocations.c.device_pk,
    _allocations.c.started,
).where(_allocations.c.node_id == bindparam("node_id"), _allocations.c.ended.is_(None))


def referenced_devices(
    wanted: set[AllocationKey], allocatable: dict[str, set[str]] | None
) -> set[tuple[str, str]]:
    """(resource, device ID) of every device a snapshot names, held or allocatable."""
    referenced = {(key[3], key[4]) for key in wanted}
    for resource, ids in (allocatable or {}).items():
        referenced.update((resource, device_id) for device_id in ids)
    return referenced


def _allocation_key(allocation: CurrentAllocation) -> AllocationKey:
    return (
        allocation.namespace,
        allocation.pod,
        allocation.container,
        allocation.resource,
        allocation.device_id,
    )


def holdings_of(
    device_rows: Iterable[Sequence[Any]],
    allocations: Iterable[CurrentAllocation],
    resources: set[str],
    claims_open: bool | None,
) -> NodeHoldings:
    """NodeHoldings from the node's device rows (pk, resource, device ID, health, state) and
    current allocations."""
    holdings = NodeHoldings(devices={}, present=0, allocations={}, claims_open=claims_open)
    for pk, resource, device_id, health, state in device_rows:
        holdings.present += state == PRESENT
        if resource in resources:
            holdings.devices[(resource, device_id)] = HeldDevice(pk, health)
    holdings.allocations = {_allocation_key(allocation): allocation for allocation in allocations}
    return holdings


def read_holdings(session: Session, node_id: int, resources: set[str]) -> NodeHoldings:
    """The node's holdings a statement at a time."""
    rows = session.execute(
        _NODE_DEVICES, {"node_id": node_id, "resources": sorted(resources)}
    ).all()
    current = session.execute(_CURRENT_ALLOCATIONS, {"node_id": node_id})
    # Every device row carries the answer; a node without devices leaves it unknown.
    claims_open = bool(rows[0].claims_open) if rows else None
    return holdings_of(
        (row[:5] for row in rows),
        (CurrentAllocation(*row) for row in current),
        resources,
        claims_open,
    )


@dataclass
class AllocationChanges:
    """What a PodResources snapshot changes of its node's devices and allocations, decided
    before anything is written. Each list is in the order its events are logged.

    `new_devices`: rows of the devices it names before any plugin snapshot did (health Unknown
    until one comes). `started`: rows of the allocations it starts; a row's `device_pk` is None
    while its device is one of `new_devices`."""

    new_devices: list[dict[str, Any]]
    ended: list[CurrentAllocation]
    learned_uids: list[dict[str, Any]]
    started: list[dict[str, Any]]

    def ended_ids(self) -> list[int]:
        return [allocation.id for allocation in self.ended]


def allocation_changes(
    node_id: int,
    referenced: set[tuple[str, str]],
    numa_hints: dict[tuple[str, str], set[int]],
    holdings: NodeHoldings,
    wanted: set[AllocationKey],
    uids: dict[tuple[str, str], str],
    now: datetime,
    *,
    max_node_devices: int | None = None,
) -> AllocationChanges:
    """The node's current allocations (`holdings.allocations`) become those `wanted`; the
    devices `referenced` that the node does not have yet are created, within the node's limit."""
    devices, current = holdings.devices, holdings.allocations
    missing = sorted(referenced - devices.keys())
    if missing:
        check_device_total(
            holdings.present + len(missing), field="pod_resources", limit=max_node_devices
        )
    new_devices = [
        {
            "node_id": node_id,
            "resource": resource,
            "device_id": device_id,
            "health": UNKNOWN,
            "raw_health": None,
            "health_source": "unknown",
            "numa_nodes": sorted(numa_hints.get((resource, device_id), ())),
            "state": PRESENT,
            "first_seen": now,
            "last_seen": now,
            "removed_at": None,
            "health_changed_at": None,
        }
        for resource, device_id in missing
    ]
    # A pod that came back under the same name with a new UID is a new holder: the earlier
    # incarnation's allocation ends and a new one starts.
    replaced = {
        key
        for key, allocation in current.items()
        if key in wanted
        and allocation.pod_uid
        and uids.get((key[0], key[1])) not in (None, allocation.pod_uid)
    }
    ending = (current.keys() - wanted) | replaced
    learned_uids = [
        {"allocation_id": allocation.id, "uid": uid}
        for key, allocation in current.items()
        if key not in ending and (uid := uids.get((key[0], key[1]))) and allocation.pod_uid != uid
    ]
    staying = current.keys() - ending
    started = []
    for namespace, pod, container, resource, device_id in sorted(wanted - staying):
        device = devices.get((resource, device_id))
        started.append(
            {
                "node_id": node_id,
                "device_pk": device.pk if device else None,
                "namespace": namespace,
                "pod": pod,
                "pod_uid": uids.get((namespace, pod)),
                "container": container,
                "resource": resource,
                "device_id": device_id,
                "started": now,
                "ended": None,
            }
        )
    return AllocationChanges(
        new_devices=new_devices,
        ended=[current[key] for key in sorted(ending)],
        learned_uids=learned_uids,
        started=started,
    )


def log_allocation_changes(
    changes: AllocationChanges,
    node_name: str,
    devices: dict[tuple[str, str], HeldDevice],
    log: EventLog,
) -> None:
    """The events of `changes`. `devices` holds every device they name, the new ones with the
    ids the database gave them, or leaves the new ones out: their events are then written by
    the statement that inserts them, which finds their ids (`EventLog.write_with`)."""
    for row in changes.new_devices:
        resource, device_id = row["resource"], row["device_id"]
        created = devices.get((resource, device_id))
        log.add(
            "device_added",
            node=node_name,
            resource=resource,
            device_id=device_id,
            device_pk=created.pk if created else None,
            after={"health": UNKNOWN, "numa_nodes": row["numa_nodes"], "via": "podresources"},
        )
    for allocation in changes.ended:
        log.add(
            "released",
            node=node_name,
            resource=allocation.resource,
            device_id=allocation.device_id,
            device_pk=allocation.device_pk,
            namespace=allocation.namespace,
            pod=allocation.pod,
            container=allocation.container,
            before={"started": allocation.started.isoformat(), "pod_uid": allocation.pod_uid},
        )
    for row in changes.started:
        device = devices.get((row["resource"], row["device_id"]))
        log.add(
            "allocated",
            node=node_name,
            resource=row["resource"],
            device_id=row["device_id"],
            device_pk=device.pk if device else None,
            namespace=row["namespace"],
            pod=row["pod"],
            container=row["container"],
            # A device not held yet is one of `changes.new_devices`.
            after={"health": device.health if device else UNKNOWN},
        )


# Devices first referenced here, before any plugin snapshot: health Unknown until one comes.
_INSERT_DEVICES = BulkInsertReturning(
    _devices,
    shared=("node_id", "health", "health_source", "state", "first_seen", "last_seen"),
    per_row=("resource", "device_id", "numa_nodes"),
    returning=("id", "resource", "device_id", "health"),
)


class Ending:
    """Ends the open rows of `table` whose ids are given, at a time."""

    def __init__(self, table: Table) -> None:
        self._in_list = (
            update(table)
            .where(table.c.id.in_(bindparam("ids", expanding=True)))
            .values(ended=bindparam("at", type_=table.c.ended.type))
        )
        self._any = (
            update(table)
            .where(table.c.id == any_(bindparam("ids", type_=ARRAY(BigInteger()))))
            .values(ended=bindparam("at", type_=table.c.ended.type))
        )

    def execute(self, session: Session, ids: list[int], at: datetime) -> None:
        if ids:
            statement = self._any if on_postgresql(session) else self._in_list
            session.execute(statement, {"ids": ids, "at": at})


# Core statements built once (see inventory/write/receipts.py), all run by a PodResources
# snapshot.
_END_ALLOCATIONS = Ending(_allocations)
_SET_POD_UID = (
    update(_allocations)
    .where(_allocations.c.id == bindparam("allocation_id"))
    .values(pod_uid=bindparam("uid"))
)
_INSERT_ALLOCATIONS = BulkInsert(
    _allocations,
    shared=("node_id", "started"),
    per_row=("device_pk", "namespace", "pod", "pod_uid", "container", "resource", "device_id"),
)


def write_allocation_changes(
    session: Session, node_id: int, changes: AllocationChanges, now: datetime
) -> dict[tuple[str, str], HeldDevice]:
    """Write `changes` a statement at a time; the devices created, by (resource, device ID)."""
    created = {
        (row.resource, row.device_id): HeldDevice(row.id, row.health)
        for row in _INSERT_DEVICES.execute_returning(session, changes.new_devices)
    }
    if created:
        # Another stream's rows: its next snapshot must be applied in full.
        streams = sorted({listandwatch_stream(resource) for resource, _ in created})
        forget_content_hashes(session, node_id, streams)
    _END_ALLOCATIONS.execute(session, changes.ended_ids(), now)
    if changes.learned_uids:
        session.execute(_SET_POD_UID, changes.learned_uids)
    started = [
        row
        if row["device_pk"] is not None
        else {**row, "device_pk": created[(row["resource"], row["device_id"])].pk}
        for row in changes.started
    ]
    _INSERT_ALLOCATIONS.execute(session, started)
    return created


_node_resources = table_of(NodeResource)
_DELETE_ALLOCATABLE = delete(_node_resources).where(
    _node_resources.c.node_id == bindparam("node_id")
)
_INSERT_ALLOCATABLE = insert(_node_resources)


def allocatable_rows(allocatable: dict[str, set[str]]) -> list[dict[str, Any]]:
    """Each allocatable set as it is stored: its resource and sorted device IDs."""
    return [
        {"resource": resource, "ids": sorted(ids)} for resource, ids in sorted(allocatable.items())
    ]


def replace_allocatable(
    session: Session, node_id: int, allocatable: dict[str, set[str]], now: datetime
) -> None:
    """The node's allocatable sets become those given, a statement at a time."""
    sets = allocatable_rows(allocatable)
    session.execute(_DELETE_ALLOCATABLE, {"node_id": node_id})
    if sets:
        session.execute(
            _INSERT_ALLOCATABLE,
            [
                {
                    "node_id": node_id,
                    "resource": entry["resource"],
                    "allocatable_device_ids": entry["ids"],
                    "updated_at": now,
                }
                for entry in sets
            ],
        )
