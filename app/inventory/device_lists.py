"""The ListAndWatch stream: one (node, resource)'s device list, as its device plugin reports it.

A snapshot replaces the whole list, as the kubelet does with each ListAndWatch message: devices
missing from it become removed, and come back if they reappear. A derived list (no tap) is
also weighed against the Node's status (app/inventory/derived_health.py): a device it still
lists may be removed because capacity no longer counts it. The stream also owns the plugin's
registration. Other writers change these rows only through app/inventory/other_writers.py,
which keeps the stream's receipt consistent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.inventory.derived_health import DERIVED, NotOffered, status_counts, withheld
from app.inventory.events import EventLog
from app.inventory.fields import HEALTHY, PRESENT, REMOVED, UNHEALTHY
from app.inventory.models import Device, Node, PluginRegistration
from app.inventory.node_limits import check_node_device_limit
from app.inventory.schemas import ListAndWatchSnapshot


def kubelet_health(raw: str) -> str:
    """The kubelet counts only the exact string "Healthy" as healthy."""
    return HEALTHY if raw == HEALTHY else UNHEALTHY


def replace_device_list(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    now: datetime,
    log: EventLog,
    *,
    max_node_devices: int | None = None,
) -> None:
    existing = {
        d.device_id: d
        for d in session.scalars(
            select(Device).where(Device.node_id == node_id, Device.resource == snapshot.resource)
        )
    }
    where: dict[str, Any] = {"node": snapshot.node, "resource": snapshot.resource}
    gone = _withheld_by_status(session, node_id, snapshot, existing, now)
    new_devices: list[Device] = []

    def device_event(
        kind: str,
        device: Device,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
    ) -> None:
        log.add(
            kind,
            node=snapshot.node,
            resource=snapshot.resource,
            device_id=device.device_id,
            device_pk=device.id,
            before=before,
            after=after,
        )

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
        if device.state != PRESENT and incoming.ID not in gone:
            device_event(
                "device_reappeared",
                device,
                before={"state": device.state},
                after={"state": PRESENT},
            )
            device.state = PRESENT
            device.removed_at = None
            device.removed_by_capacity = False
        if device.health != health:
            device_event(
                "health_changed",
                device,
                before={"health": device.health, "raw_health": device.raw_health},
                after={"health": health, "raw_health": incoming.health},
            )
            device.health = health
            device.health_changed_at = now
        device.raw_health = incoming.health
        device.health_source = snapshot.health_source
        if numa and device.numa_nodes != numa:
            device_event(
                "topology_changed",
                device,
                before={"numa_nodes": device.numa_nodes},
                after={"numa_nodes": numa},
            )
            device.numa_nodes = numa
        if incoming.ID in gone:
            mark_removed_by_capacity(device, now, log, **where)
    for device in existing.values():
        # Not listed: removed by its stream, whatever the Node's status says from now on.
        device.removed_by_capacity = False
        if device.state == PRESENT:
            device.state = REMOVED
            device.removed_at = now
            device.last_seen = now
            device_event(
                "device_removed",
                device,
                before={"state": PRESENT},
                after={"state": REMOVED},
            )
    if new_devices:
        check_node_device_limit(
            session,
            node_id,
            field="devices",
            incoming=len(snapshot.devices),
            limit=max_node_devices,
            other_than_resource=snapshot.resource,
        )
        session.add_all(new_devices)
        session.flush()
        for device in new_devices:
            device_event(
                "device_added",
                device,
                after={
                    "health": device.health,
                    "raw_health": device.raw_health,
                    "numa_nodes": device.numa_nodes,
                },
            )
            if device.device_id in gone:
                mark_removed_by_capacity(device, now, log, **where)


def _withheld_by_status(
    session: Session,
    node_id: int,
    snapshot: ListAndWatchSnapshot,
    existing: dict[str, Device],
    now: datetime,
) -> set[str]:
    """Devices of a derived snapshot that the Node's status counts as gone
    (app/inventory/derived_health.py). A device's departure is when its health last turned
    Unhealthy: now, if this snapshot turns it."""
    if snapshot.health_source != DERIVED:
        return set()
    node = session.execute(select(Node.capacity, Node.allocatable).where(Node.id == node_id)).one()
    counts = status_counts(node.capacity, node.allocatable, snapshot.resource)
    if counts is None:
        return set()
    offered = 0
    not_offered: list[NotOffered] = []
    for incoming in snapshot.devices:
        health = kubelet_health(incoming.health)
        if health == HEALTHY:
            offered += 1
            continue
        device = existing.get(incoming.ID)
        if device is None or device.health != health:
            departed = now
        else:
            departed = device.health_changed_at or device.first_seen
        not_offered.append(NotOffered(incoming.ID, departed))
    return withheld(counts, offered, not_offered)


def mark_removed_by_capacity(device: Device, now: datetime, log: EventLog, **where: Any) -> None:
    """Remove a device its stream still lists, as the Node's status counts it gone."""
    device.removed_by_capacity = True
    if device.state != PRESENT:
        return
    device.state = REMOVED
    device.removed_at = now
    log.add(
        "device_removed",
        **where,
        device_id=device.device_id,
        device_pk=device.id,
        before={"state": PRESENT},
        after={"state": REMOVED, "reason": REMOVED_BY_CAPACITY_REASON},
    )


REMOVED_BY_CAPACITY_REASON = "not offered by the kubelet, and not counted in the Node's capacity"


def record_plugin(
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
