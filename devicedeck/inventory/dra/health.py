"""A DRA device's health with its provenance, and its history as events: the one writer of
`dra_device_health`, for every source (pod status and claim conditions from the cluster
watcher, the drivers' health streams from node agents). The latest report wins, whatever its
source, as for a plugin device.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraDevice, DraDeviceHealth
from devicedeck.inventory.events import EventLog

MESSAGE_LIMIT = 1024

# (driver, pool, device)
DeviceKey = tuple[str, str, str]


def device_id(key: DeviceKey) -> str:
    """driver/pool/device: how events and the kubelet name a DRA device."""
    return "/".join(key)


def set_health(
    session: Session,
    key: DeviceKey,
    health: str,
    *,
    raw: str,
    source: str,
    reported_by: str,
    message: str | None,
    now: datetime,
    log: EventLog,
    node: str | None = None,
) -> None:
    """Record a report; a change of health (not of the wording) is an event. `node` stands in
    for the device's node while no slice publishes the device on one."""
    driver, pool, name = key
    row = session.scalars(
        select(DraDeviceHealth).where(
            DraDeviceHealth.driver == driver,
            DraDeviceHealth.pool == pool,
            DraDeviceHealth.device == name,
        )
    ).one_or_none()
    published_on = session.scalar(
        select(DraDevice.node)
        .where(DraDevice.driver == driver, DraDevice.pool == pool, DraDevice.device == name)
        .order_by(DraDevice.pool_generation.desc(), DraDevice.id)
        .limit(1)
    )
    node = published_on or node
    message = message[:MESSAGE_LIMIT] if message else None
    if row is not None and row.health == health:
        row.raw_health, row.health_source, row.reported_by = raw, source, reported_by
        row.message = message
        return
    before = (
        {"health": row.health, "raw_health": row.raw_health, "health_source": row.health_source}
        if row is not None
        else None
    )
    log.add(
        "dra_health_changed",
        node=node,
        resource=driver,
        device_id=device_id(key),
        before=before,
        after={
            "health": health,
            "raw_health": raw,
            "health_source": source,
            "reported_by": reported_by,
            "message": message,
        },
    )
    if row is None:
        row = DraDeviceHealth(driver=driver, pool=pool, device=name)
        session.add(row)
    row.node = node
    row.health, row.raw_health, row.health_source = health, raw, source
    row.reported_by, row.message, row.changed_at = reported_by, message, now
