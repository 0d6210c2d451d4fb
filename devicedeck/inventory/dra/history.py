"""One DRA device over time: what it is now, its health reports, and who held it.

A DRA device is named by (driver, pool, device), not by a row id: its dra_devices row is
replaced whenever the driver republishes its pool, while its health and allocations outlive that.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.cluster.models import DraHealthReport
from devicedeck.inventory.dra.devices import dra_device_by_key
from devicedeck.inventory.dra.summary import health_by_device, summaries
from devicedeck.inventory.models import ClaimAllocation, Event, Node

HISTORY_LIMIT = 500
HEALTH_EVENT = "dra_health_changed"


def dra_device_id(driver: str, pool: str, device: str) -> str:
    """driver/pool/device, as the kubelet and the change log name a DRA device."""
    return f"{driver}/{pool}/{device}"


def dra_device_details(
    session: Session, driver: str, pool: str, device: str
) -> dict[str, Any] | None:
    """The device with its histories; None if nothing was ever known of it."""
    key = (driver, pool, device)
    published = dra_device_by_key(session, driver, pool, device)
    events = list(
        session.scalars(
            select(Event)
            .where(
                Event.resource == driver,
                Event.device_id == dra_device_id(*key),
                Event.kind == HEALTH_EVENT,
            )
            .order_by(Event.id.desc())
            .limit(HISTORY_LIMIT)
        )
    )
    allocations = session.execute(
        select(ClaimAllocation, Node.name)
        .join(Node, Node.id == ClaimAllocation.node_id)
        .where(
            ClaimAllocation.driver == driver,
            ClaimAllocation.pool == pool,
            ClaimAllocation.device == device,
        )
        .order_by(ClaimAllocation.started.desc(), ClaimAllocation.id.desc())
        .limit(HISTORY_LIMIT)
    ).all()
    health = health_by_device(session, [key]).get(key)
    stream = session.scalars(
        select(DraHealthReport).where(
            DraHealthReport.driver == driver,
            DraHealthReport.pool == pool,
            DraHealthReport.device == device,
        )
    ).one_or_none()
    if published is None and not events and not allocations and health is None:
        return None
    return {
        "driver": driver,
        "pool": pool,
        "device": device,
        "published": published is not None,
        "current": summaries(session, [published])[0] if published is not None else None,
        "health": health,
        "health_stream": None
        if stream is None
        else {
            "node": stream.node,
            "health": stream.health,
            "checked_at": iso(stream.checked_at),
            "timeout_seconds": stream.timeout_seconds,
            "message": stream.message,
            "received_at": iso(stream.received_at),
        },
        "health_history": [
            {
                "at": iso(e.at),
                "node": e.node,
                "health": (e.after or {}).get("health"),
                "raw_health": (e.after or {}).get("raw_health"),
                "source": (e.after or {}).get("health_source"),
                "reported_by": (e.after or {}).get("reported_by"),
                "message": (e.after or {}).get("message"),
                "before": (e.before or {}).get("health"),
            }
            for e in events
        ],
        "allocation_history": [
            {
                "node": node,
                "namespace": a.namespace,
                "pod": a.pod,
                "container": a.container,
                "claim": f"{a.claim_namespace}/{a.claim_name}",
                "share_id": a.share_id,
                "started": iso(a.started),
                "ended": iso(a.ended),
            }
            for a, node in allocations
        ],
    }
