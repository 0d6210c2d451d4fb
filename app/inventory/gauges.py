"""What the service's Prometheus gauges report, read from the database at scrape time.

The per node and resource figures come from the counters the ingest path keeps
(device_counts), so a scrape reads a few rows per node and never aggregates over devices; every
replica reads the same rows and so reports the same values. Only the opt-in per-device gauge
reads the devices table.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, and_, cast, extract, select
from sqlalchemy.orm import Session

from app.inventory.fields import HEALTHY, PRESENT
from app.inventory.models import Allocation, Device, DeviceCount, Node, table_of

NODES = table_of(Node)
COUNTS = table_of(DeviceCount)
DEVICES = table_of(Device)
ALLOCATIONS = table_of(Allocation)


# One node and resource: name, last seen (Unix time), resource, then the present devices as
# reported (a stale node's are not yet Unknown: the caller knows the time): healthy,
# unhealthy, unknown, all, held. A node without devices has one row with resource None.
NodeRow = tuple[str, float, str | None, int, int, int, int, int]


def node_rows(session: Session) -> list[NodeRow]:
    """Every node with its per-resource counters, a node's rows together. Plain tuples: a
    fleet has tens of thousands of these rows, read at every scrape."""
    query = (
        select(
            NODES.c.name,
            # In the database: converting tens of thousands of timestamps in Python costs more
            # than the rest of a scrape.
            cast(extract("epoch", NODES.c.last_seen), Float),
            COUNTS.c.resource,
            COUNTS.c.healthy,
            COUNTS.c.unhealthy,
            COUNTS.c.unknown,
            COUNTS.c.devices,
            COUNTS.c.allocated,
        )
        .select_from(
            NODES.outerjoin(COUNTS, and_(COUNTS.c.node_id == NODES.c.id, COUNTS.c.devices > 0))
        )
        .order_by(NODES.c.id)
    )
    return session.execute(query).all()  # type: ignore[return-value]


# One present device: node, resource, device ID, healthy, the namespace and pod of the pod
# that holds it ("" when none does).
DeviceRow = tuple[str, str, str, bool, str, str]


def device_rows(session: Session, cutoff: datetime) -> list[DeviceRow]:
    """Every present device of every node seen since `cutoff`, with one pod that holds it
    now (the first by namespace and name), or none. One pass over the present devices."""
    query = (
        select(
            DEVICES.c.id,
            NODES.c.name,
            DEVICES.c.resource,
            DEVICES.c.device_id,
            DEVICES.c.health,
            ALLOCATIONS.c.namespace,
            ALLOCATIONS.c.pod,
        )
        .select_from(
            DEVICES.join(NODES, NODES.c.id == DEVICES.c.node_id).outerjoin(
                ALLOCATIONS,
                and_(
                    ALLOCATIONS.c.device_pk == DEVICES.c.id,
                    ALLOCATIONS.c.ended.is_(None),
                    DEVICES.c.held > 0,
                ),
            )
        )
        .where(DEVICES.c.state == PRESENT, NODES.c.last_seen >= cutoff)
    )
    found: dict[int, DeviceRow] = {}
    for pk, node, resource, device_id, health, namespace, pod in session.execute(query).all():
        holder = (namespace or "", pod or "")
        seen = found.get(pk)
        if seen is not None and seen[4:] <= holder:
            continue  # held by several pods (containers): keep the first
        found[pk] = (node, resource, device_id, health == HEALTHY, *holder)
    return list(found.values())
