"""Applying snapshots: each one replaces what its stream owns, in one transaction, with events.

A ListAndWatch snapshot owns the device list of one (node, resource). A PodResources snapshot
owns the node's current allocations (device-plugin and DRA) and its allocatable sets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, Update, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from app.inventory.bulk import BulkInsert
from app.inventory.events import EventLog
from app.inventory.models import (
    Allocation,
    ClaimAllocation,
    Device,
    NodeResource,
    PluginRegistration,
    table_of,
)
from app.inventory.nodes import (
    PODRESOURCES_STREAM,
    Order,
    check_order,
    find_receipt,
    forget_content_hash,
    listandwatch_stream,
    lock_node_seen,
    record_receipt,
    record_unchanged_snapshot,
    unchanged_check,
)
from app.inventory.schemas import ListAndWatchSnapshot, PodResourcesSnapshot

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
PRESENT = "present"
REMOVED = "removed"


@dataclass
class IngestResult:
    """What a snapshot changed. `duplicate` marks a repeat of the last seq (nothing applied)."""

    changed: bool = False
    duplicate: bool = False
    added: int = 0
    removed: int = 0
    reappeared: int = 0
    health_changes: int = 0
    allocated: int = 0
    released: int = 0
    events: int = 0


def kubelet_health(raw: str) -> str:
    """The kubelet counts only the exact string "Healthy" as healthy."""
    return HEALTHY if raw == HEALTHY else UNHEALTHY


def apply_listandwatch_snapshot(
    session: Session,
    snapshot: ListAndWatchSnapshot,
    *,
    now: datetime,
    actor: str,
    content_hash: str | None = None,
    check_unchanged_first: bool = True,
) -> IngestResult:
    def replace(node_id: int, log: EventLog) -> None:
        _replace_device_list(session, node_id, snapshot, now, log)
        if snapshot.plugin is not None:
            _record_plugin(session, node_id, snapshot, now, log)

    stream = listandwatch_stream(snapshot.resource)
    return _apply_stream(
        session,
        snapshot,
        stream,
        replace,
        now=now,
        actor=actor,
        content_hash=content_hash,
        check_unchanged_first=check_unchanged_first,
    )


def _apply_stream(
    session: Session,
    snapshot: ListAndWatchSnapshot | PodResourcesSnapshot,
    stream: str,
    replace: Callable[[int, EventLog], None],
    *,
    now: datetime,
    actor: str,
    content_hash: str | None,
    check_unchanged_first: bool,
) -> IngestResult:
    """The ordering and idempotency rules every stream shares; `replace` changes what the
    stream owns, and runs only when the content differs from the last applied.

    A caller that has computed the content hash passes it. The unchanged-snapshot statement
    first is only a shortcut: a caller that knows the content changed, or has just tried that
    statement, skips it, and the full path below still finds an unchanged snapshot unchanged."""
    content_hash = content_hash or snapshot.content_hash()
    if check_unchanged_first:
        check = unchanged_check(snapshot, stream=stream, content_hash=content_hash, now=now)
        if record_unchanged_snapshot(session, check):
            return IngestResult()
    log = EventLog(at=now, actor=actor)
    node_id = lock_node_seen(session, snapshot.node, now, log)
    receipt = find_receipt(session, node_id, stream)
    order = check_order(receipt, snapshot.source, content_hash, stream)
    if order is Order.REPEAT:
        log.write(session)
        return IngestResult(duplicate=True, changed=bool(log.rows), events=len(log.rows))
    if receipt is None or receipt.content_hash != content_hash:
        replace(node_id, log)
    record_receipt(
        session,
        receipt,
        node_id=node_id,
        stream=stream,
        source=snapshot.source,
        payload_hash=content_hash,
        observed_at=snapshot.observed_at,
        now=now,
    )
    log.write(session)
    return IngestResult(
        changed=bool(log.rows),
        added=log.count("device_added"),
        removed=log.count("device_removed"),
        reappeared=log.count("device_reappeared"),
        health_changes=log.count("health_changed"),
        allocated=log.count("allocated") + log.count("claim_allocated"),
        released=log.count("released") + log.count("claim_released"),
        events=len(log.rows),
    )


def _replace_device_list(
    session: Session, node_id: int, snapshot: ListAndWatchSnapshot, now: datetime, log: EventLog
) -> None:
    existing = {
        d.device_id: d
        for d in session.scalars(
            select(Device).where(Device.node_id == node_id, Device.resource == snapshot.resource)
        )
    }
    where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
    new_devices: list[Device] = []
    for incoming in snapshot.devices:
        health = kubelet_health(incoming.health)
        numa = incoming.topology.numa_ids() if incoming.topology else []
        device = existing.pop(incoming.ID, None)
        if device is None:
            device = Device(
                node_id=node_id,
                resource=snapshot.resource,
                device_id=incoming.ID,
                health=health,
                raw_health=incoming.health,
                health_source=snapshot.health_source,
                numa_nodes=numa,
                state=PRESENT,
                first_seen=now,
                last_seen=now,
                health_changed_at=now,
            )
            new_devices.append(device)
            continue
        device.last_seen = now
        if device.state != PRESENT:
            log.add(
                "device_reappeared",
                **where,
                device_id=device.device_id,
                device_pk=device.id,
                before={"state": device.state},
                after={"state": PRESENT},
            )
            device.state = PRESENT
            device.removed_at = None
        if device.health != health:
            log.add(
                "health_changed",
                **where,
                device_id=device.device_id,
                device_pk=device.id,
                before={"health": device.health, "raw_health": device.raw_health},
                after={"health": health, "raw_health": incoming.health},
            )
            device.health = health
            device.health_changed_at = now
        device.raw_health = incoming.health
        device.health_source = snapshot.health_source
        if numa and device.numa_nodes != numa:
            log.add(
                "topology_changed",
                **where,
                device_id=device.device_id,
                device_pk=device.id,
                before={"numa_nodes": device.numa_nodes},
                after={"numa_nodes": numa},
            )
            device.numa_nodes = numa
    for device in existing.values():
        if device.state == PRESENT:
            device.state = REMOVED
            device.removed_at = now
            device.last_seen = now
            log.add(
                "device_removed",
                **where,
                device_id=device.device_id,
                device_pk=device.id,
                before={"state": PRESENT},
                after={"state": REMOVED},
            )
    if new_devices:
        session.add_all(new_devices)
        session.flush()
        for device in new_devices:
            log.add(
                "device_added",
                **where,
                device_id=device.device_id,
                device_pk=device.id,
                after={
                    "health": device.health,
                    "raw_health": device.raw_health,
                    "numa_nodes": device.numa_nodes,
                },
            )


def _record_plugin(
    session: Session, node_id: int, snapshot: ListAndWatchSnapshot, now: datetime, log: EventLog
) -> None:
    assert snapshot.plugin is not None
    info: dict[str, Any] = {
        "endpoint": snapshot.plugin.endpoint,
        "api_version": snapshot.plugin.version,
        "options": snapshot.plugin.options.model_dump() if snapshot.plugin.options else None,
    }
    registration = session.scalars(
        select(PluginRegistration).where(
            PluginRegistration.node_id == node_id,
            PluginRegistration.resource == snapshot.resource,
        )
    ).one_or_none()
    where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
    if registration is None:
        session.add(
            PluginRegistration(
                node_id=node_id, resource=snapshot.resource, first_seen=now, last_seen=now, **info
            )
        )
        log.add("plugin_registered", **where, after=info)
        return
    before = {
        "endpoint": registration.endpoint,
        "api_version": registration.api_version,
        "options": registration.options,
    }
    registration.last_seen = now
    if before != info:
        log.add("plugin_changed", **where, before=before, after=info)
        registration.endpoint = info["endpoint"]
        registration.api_version = info["api_version"]
        registration.options = info["options"]


AllocationKey = tuple[str, str, str, str, str]  # namespace, pod, container, resource, device ID
ClaimKey = tuple[str, str, str, str, str, str, str, str, str | None]


def apply_podresources_snapshot(
    session: Session,
    snapshot: PodResourcesSnapshot,
    *,
    now: datetime,
    actor: str,
    content_hash: str | None = None,
    check_unchanged_first: bool = True,
) -> IngestResult:
    def replace(node_id: int, log: EventLog) -> None:
        wanted, numa_hints, uids = _wanted_allocations(snapshot)
        allocatable = _allocatable_sets(snapshot)
        devices = _ensure_devices(
            session, node_id, snapshot.node, wanted, numa_hints, allocatable, now, log
        )
        _replace_allocations(session, node_id, snapshot.node, wanted, uids, devices, now, log)
        _replace_claim_allocations(session, node_id, snapshot, now, log)
        if allocatable is not None:
            _replace_allocatable(session, node_id, allocatable, now)

    return _apply_stream(
        session,
        snapshot,
        PODRESOURCES_STREAM,
        replace,
        now=now,
        actor=actor,
        content_hash=content_hash,
        check_unchanged_first=check_unchanged_first,
    )


def _wanted_allocations(
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


def _allocatable_sets(snapshot: PodResourcesSnapshot) -> dict[str, set[str]] | None:
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


def _ensure_devices(
    session: Session,
    node_id: int,
    node_name: str,
    wanted: set[AllocationKey],
    numa_hints: dict[tuple[str, str], set[int]],
    allocatable: dict[str, set[str]] | None,
    now: datetime,
    log: EventLog,
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


def _ending(table: Table) -> Update:
    """Ends the open rows whose ids are given (`ids`) at `at`."""
    return (
        update(table)
        .where(table.c.id.in_(bindparam("ids", expanding=True)))
        .values(ended=bindparam("at", type_=table.c.ended.type))
    )


# Core statements built once (see app/inventory/nodes.py): a PodResources snapshot runs them all.
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
_END_ALLOCATIONS = _ending(_allocations)
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


def _replace_allocations(
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


_claims = table_of(ClaimAllocation)
_CURRENT_CLAIMS = select(
    _claims.c.id,
    _claims.c.namespace,
    _claims.c.pod,
    _claims.c.container,
    _claims.c.claim_namespace,
    _claims.c.claim_name,
    _claims.c.driver,
    _claims.c.pool,
    _claims.c.device,
    _claims.c.share_id,
).where(_claims.c.node_id == bindparam("node_id"), _claims.c.ended.is_(None))
_END_CLAIMS = _ending(_claims)
_INSERT_CLAIMS = insert(_claims)


def _replace_claim_allocations(
    session: Session, node_id: int, snapshot: PodResourcesSnapshot, now: datetime, log: EventLog
) -> None:
    wanted: dict[ClaimKey, list[str]] = {}
    for pod in snapshot.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                for res in claim.claim_resources:
                    key: ClaimKey = (
                        pod.namespace,
                        pod.name,
                        container.name,
                        claim.claim_namespace,
                        claim.claim_name,
                        res.driver_name,
                        res.pool_name,
                        res.device_name,
                        res.share_id,
                    )
                    wanted[key] = [c.name for c in res.cdi_devices]
    current = {
        (
            c.namespace,
            c.pod,
            c.container,
            c.claim_namespace,
            c.claim_name,
            c.driver,
            c.pool,
            c.device,
            c.share_id,
        ): c
        for c in session.execute(_CURRENT_CLAIMS, {"node_id": node_id})
    }
    ended: list[int] = []
    for key in sorted(current.keys() - wanted.keys(), key=str):
        claim_row = current[key]
        ended.append(claim_row.id)
        log.add(
            "claim_released",
            node=snapshot.node,
            resource=claim_row.driver,
            device_id=f"{claim_row.driver}/{claim_row.pool}/{claim_row.device}",
            namespace=claim_row.namespace,
            pod=claim_row.pod,
            container=claim_row.container,
            before={"claim": f"{claim_row.claim_namespace}/{claim_row.claim_name}"},
        )
    if ended:
        session.execute(_END_CLAIMS, {"ids": ended, "at": now})
    rows = []
    for key in sorted(wanted.keys() - current.keys(), key=str):
        (
            namespace,
            pod_name,
            container_name,
            claim_ns,
            claim_name,
            driver,
            pool,
            device,
            share_id,
        ) = key
        rows.append(
            {
                "node_id": node_id,
                "namespace": namespace,
                "pod": pod_name,
                "container": container_name,
                "claim_namespace": claim_ns,
                "claim_name": claim_name,
                "driver": driver,
                "pool": pool,
                "device": device,
                "share_id": share_id,
                "cdi_devices": wanted[key],
                "started": now,
                "ended": None,
            }
        )
        log.add(
            "claim_allocated",
            node=snapshot.node,
            resource=driver,
            device_id=f"{driver}/{pool}/{device}",
            namespace=namespace,
            pod=pod_name,
            container=container_name,
            after={"claim": f"{claim_ns}/{claim_name}", "share_id": share_id},
        )
    if rows:
        session.execute(_INSERT_CLAIMS, rows)


def _replace_allocatable(
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
