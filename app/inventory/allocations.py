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

from sqlalchemy import Table, Update, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from app.inventory.bulk import BulkInsert
from app.inventory.events import EventLog
from app.inventory.fields import PRESENT, UNKNOWN
from app.inventory.models import Allocation, Device, NodeResource, table_of
from app.inventory.node_limits import check_node_device_limit
from app.inventory.receipts import forget_content_hash, listandwatch_stream
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


@dataclass(frozen=True)
class HeldDevice:
    """What an allocation needs of its device."""

    pk: int
    health: str


_devices = table_of(Device)
_NODE_DEVICES = select(
    _devices.c.id, _devices.c.resource, _devices.c.device_id, _devices.c.health
).where(
    _devices.c.node_id == bindparam("node_id"),
    _devices.c.resource.in_(bindparam("resources", expanding=True)),
)
_INSERT_DEVICES = insert(_devices).returning(
    _devices.c.id, _devices.c.resource, _devices.c.device_id, _devices.c.health
)


def ensure_devices(
    session: Session,
    node_id: int,
    node_name: str,
    wanted: set[AllocationKey],
    numa_hints: dict[tuple[str, str], set[int]],
    allocatable: dict[str, set[str]] | None,
    now: datetime,
    log: EventLog,
    *,
    max_node_devices: int | None = None,
) -> dict[tuple[str, str], HeldDevice]:
    """Devices of the node by (resource, device ID); ones referenced before any plugin snapshot
    are created with health Unknown."""
    referenced = {(key[3], key[4]) for key in wanted}
    for resource, ids in (allocatable or {}).items():
        referenced.update((resource, device_id) for device_id in ids)
    if not referenced:
        return {}
    resources = sorted({resource for resource, _ in referenced})
    devices = {
        (row.resource, row.device_id): HeldDevice(row.id, row.health)
        for row in session.execute(_NODE_DEVICES, {"node_id": node_id, "resources": resources})
    }
    missing = sorted(referenced - devices.keys())
    if not missing:
        return devices
    check_node_device_limit(
        session, node_id, field="pod_resources", incoming=len(missing), limit=max_node_devices
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
        for row in session.execute(_INSERT_DEVICES, rows)
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
    for resource in sorted({resource for resource, _ in missing}):
        forget_content_hash(session, node_id, listandwatch_stream(resource))
    return devices


def ending(table: Table) -> Update:
    """Ends the open rows whose ids are given (`ids`) at `at`."""
    return (
        update(table)
        .where(table.c.id.in_(bindparam("ids", expanding=True)))
        .values(ended=bindparam("at", type_=table.c.ended.type))
    )


# Core statements built once (see app/inventory/receipts.py): a PodResources snapshot runs them all.
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
_END_ALLOCATIONS = ending(_allocations)
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
    now: datetime,
    log: EventLog,
) -> None:
    current = {
        (a.namespace, a.pod, a.container, a.resource, a.device_id): a
        for a in session.execute(_CURRENT_ALLOCATIONS, {"node_id": node_id})
    }
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
    if ended:
        session.execute(_END_ALLOCATIONS, {"ids": ended, "at": now})
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


def replace_allocatable(
    session: Session, node_id: int, allocatable: dict[str, set[str]], now: datetime
) -> None:
    session.execute(delete(NodeResource).where(NodeResource.node_id == node_id))
    if allocatable:
        session.execute(
            insert(NodeResource),
            [
                {
                    "node_id": node_id,
                    "resource": resource,
                    "allocatable_device_ids": sorted(ids),
                    "updated_at": now,
                }
                for resource, ids in sorted(allocatable.items())
            ],
        )
