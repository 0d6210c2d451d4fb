"""The PodResources stream's device-plugin side: a node's current allocations, as intervals,
and the node's allocatable device sets.

A snapshot replaces the node's current allocations: ones it no longer lists end, new ones start.
Other writers end allocations only through `release_pod`, which keeps the stream's receipt
consistent.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import (
    ARRAY,
    BigInteger,
    String,
    Table,
    any_,
    bindparam,
    delete,
    exists,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from app.inventory.bulk import BulkInsert, BulkInsertReturning
from app.inventory.events import EventLog
from app.inventory.fields import PRESENT, UNKNOWN
from app.inventory.models import Allocation, ClaimAllocation, Device, NodeResource, table_of
from app.inventory.node_limits import check_device_total
from app.inventory.receipts import forget_content_hashes, listandwatch_stream
from app.inventory.schemas import PodResourcesSnapshot

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


# Two single-table reads, each by its node index. One read joining devices to their open
# allocations was tried: psycopg prepares a statement after a few runs, and the generic plan
# PostgreSQL made for the join while the tables had no statistics yet (a new database filling
# up) scanned every open allocation of the fleet for each device, 150 ms a snapshot.
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
).where(_devices.c.node_id == bindparam("node_id"))
# On PostgreSQL a list of values travels as one array parameter: the statement's text is the
# same whatever the list's length, so neither SQLAlchemy nor psycopg renders or parses it again.
# SQLite gets an IN list.
_NODE_DEVICES_IN = _NODE_DEVICES.where(
    or_(
        _devices.c.resource.in_(bindparam("resources", expanding=True)),
        _devices.c.state == PRESENT,
    )
)
_NODE_DEVICES_ANY = _NODE_DEVICES.where(
    or_(
        _devices.c.resource == any_(bindparam("resources", type_=ARRAY(String()))),
        _devices.c.state == PRESENT,
    )
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


def read_holdings(session: Session, node_id: int, resources: set[str]) -> NodeHoldings:
    read = _NODE_DEVICES_ANY if on_postgresql(session) else _NODE_DEVICES_IN
    holdings = NodeHoldings(devices={}, present=0, allocations={})
    for pk, resource, device_id, health, state, claims_open in session.execute(
        read, {"node_id": node_id, "resources": sorted(resources)}
    ):
        holdings.claims_open = bool(claims_open)
        holdings.present += state == PRESENT
        if resource in resources:
            holdings.devices[(resource, device_id)] = HeldDevice(pk, health)
    for row in session.execute(_CURRENT_ALLOCATIONS, {"node_id": node_id}):
        allocation = CurrentAllocation(*row)
        key = (
            allocation.namespace,
            allocation.pod,
            allocation.container,
            allocation.resource,
            allocation.device_id,
        )
        holdings.allocations[key] = allocation
    return holdings


# Devices first referenced here, before any plugin snapshot: health Unknown until one comes.
# Their ListAndWatch streams' receipts forget their content hash (see ensure_devices), on
# PostgreSQL in the same statement.
_INSERT_DEVICES = BulkInsertReturning(
    _devices,
    shared=("node_id", "health", "health_source", "state", "first_seen", "last_seen"),
    per_row=("resource", "device_id", "numa_nodes"),
    returning=("id", "resource", "device_id", "health"),
    around=(
        "WITH inserted AS ({insert}), forgotten AS ("
        " UPDATE ingest_receipts SET content_hash = NULL WHERE node_id = :node_id"
        f" AND stream IN (SELECT DISTINCT '{listandwatch_stream('')}' || resource FROM inserted)"
        ") SELECT id, resource, device_id, health FROM inserted"
    ),
)


def ensure_devices(
    session: Session,
    node_id: int,
    node_name: str,
    referenced: set[tuple[str, str]],
    numa_hints: dict[tuple[str, str], set[int]],
    holdings: NodeHoldings,
    now: datetime,
    log: EventLog,
    *,
    max_node_devices: int | None = None,
) -> dict[tuple[str, str], HeldDevice]:
    """Devices of the node by (resource, device ID), for the `referenced` ones; those
    referenced before any plugin snapshot are created with health Unknown."""
    devices = holdings.devices
    missing = sorted(referenced - devices.keys())
    if not missing:
        return devices
    check_device_total(
        holdings.present + len(missing), field="pod_resources", limit=max_node_devices
    )
    rows = [
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
    created = {
        (row.resource, row.device_id): HeldDevice(row.id, row.health)
        for row in _INSERT_DEVICES.execute_returning(session, rows)
    }
    for (resource, device_id), row in zip(missing, rows, strict=True):
        log.add(
            "device_added",
            node=node_name,
            resource=resource,
            device_id=device_id,
            device_pk=created[(resource, device_id)].pk,
            after={"health": UNKNOWN, "numa_nodes": row["numa_nodes"], "via": "podresources"},
        )
    devices.update(created)
    # Another stream's rows: its next snapshot must be applied in full.
    if not on_postgresql(session):
        streams = sorted({listandwatch_stream(resource) for resource, _ in missing})
        forget_content_hashes(session, node_id, streams)
    return devices


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


# Core statements built once (see app/inventory/receipts.py): a PodResources snapshot runs them all.
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


def replace_allocations(
    session: Session,
    node_id: int,
    node_name: str,
    wanted: set[AllocationKey],
    uids: dict[tuple[str, str], str],
    devices: dict[tuple[str, str], HeldDevice],
    current: dict[AllocationKey, CurrentAllocation],
    now: datetime,
    log: EventLog,
) -> None:
    """The node's current allocations (`current`, which this changes) become those `wanted`."""
    # A pod that came back under the same name with a new UID is a new holder: the earlier
    # incarnation's allocation ends and a new one starts.
    replaced = {
        key
        for key, allocation in current.items()
        if key in wanted
        and allocation.pod_uid
        and uids.get((key[0], key[1])) not in (None, allocation.pod_uid)
    }
    ended: list[int] = []
    for key in sorted((current.keys() - wanted) | replaced):
        allocation = current.pop(key)
        ended.append(allocation.id)
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
    _END_ALLOCATIONS.execute(session, ended, now)
    learned_uids = [
        {"allocation_id": allocation.id, "uid": uid}
        for key, allocation in current.items()
        if (uid := uids.get((key[0], key[1]))) and allocation.pod_uid != uid
    ]
    if learned_uids:
        session.execute(_SET_POD_UID, learned_uids)
    rows = []
    for namespace, pod, container, resource, device_id in sorted(wanted - current.keys()):
        device = devices[(resource, device_id)]
        rows.append(
            {
                "node_id": node_id,
                "device_pk": device.pk,
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
        log.add(
            "allocated",
            node=node_name,
            resource=resource,
            device_id=device_id,
            device_pk=device.pk,
            namespace=namespace,
            pod=pod,
            container=container,
            after={"health": device.health},
        )
    _INSERT_ALLOCATIONS.execute(session, rows)


_node_resources = table_of(NodeResource)
_DELETE_ALLOCATABLE = delete(_node_resources).where(
    _node_resources.c.node_id == bindparam("node_id")
)
_INSERT_ALLOCATABLE = insert(_node_resources)
# One statement on PostgreSQL, which writes only what differs from what is stored: a set the
# snapshot no longer lists is deleted, a new or changed one written; an unchanged set, the
# common case, is left alone (its updated_at is when it last changed).
_REPLACE_ALLOCATABLE = text(
    "WITH wanted AS ("
    " SELECT r.resource, r.ids FROM jsonb_to_recordset(:sets) AS r(resource varchar, ids jsonb)"
    "), dropped AS ("
    " DELETE FROM node_resources n WHERE n.node_id = :node_id"
    " AND n.resource NOT IN (SELECT resource FROM wanted)"
    ") "
    "INSERT INTO node_resources (node_id, resource, allocatable_device_ids, updated_at) "
    "SELECT :node_id, resource, ids::json, :now FROM wanted "
    "ON CONFLICT (node_id, resource) DO UPDATE "
    "SET allocatable_device_ids = excluded.allocatable_device_ids, "
    "updated_at = excluded.updated_at "
    "WHERE node_resources.allocatable_device_ids::jsonb "
    "<> excluded.allocatable_device_ids::jsonb"
).bindparams(
    bindparam("sets", type_=postgresql.JSONB),
    bindparam("node_id", type_=_node_resources.c.node_id.type),
    bindparam("now", type_=_node_resources.c.updated_at.type),
)


def replace_allocatable(
    session: Session, node_id: int, allocatable: dict[str, set[str]], now: datetime
) -> None:
    """The node's allocatable sets become those given, each stored as sorted device IDs."""
    sets = [
        {"resource": resource, "ids": sorted(ids)} for resource, ids in sorted(allocatable.items())
    ]
    if on_postgresql(session):
        session.execute(_REPLACE_ALLOCATABLE, {"sets": sets, "node_id": node_id, "now": now})
        return
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
