"""What the service's Prometheus gauges report, read from the database.

The per node and resource figures come from the counters the ingest path keeps
(device_counts), so a scrape reads a few rows per node and never aggregates over devices; every
replica reads the same rows and so reports the same values. Only the opt-in per-device gauge
reads the devices table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Float, Select, String, and_, cast, extract, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from devicedeck.inventory.fields import HEALTHY, PRESENT
from devicedeck.inventory.models import Allocation, Device, DeviceCount, Node, table_of

NODES = table_of(Node)
COUNTS = table_of(DeviceCount)
DEVICES = table_of(Device)
ALLOCATIONS = table_of(Allocation)


# One node: name, last seen (Unix time), and its per-resource counters of present devices as
# reported (a stale node's are not yet Unknown: the caller knows the time) in one text, None
# when it has none. For each resource, "resource healthy unhealthy unknown all held" with
# FIELD between the values and RECORD between the resources, in no set order.
NodeRow = tuple[str, float, str | None]
FIELD = "\x1f"  # the ASCII unit and record separators: no resource name holds them
RECORD = "\x1e"


def _node_rows_query() -> Select[Any]:
    counters: ColumnElement[Any] = COUNTS.c.resource
    for column in (
        COUNTS.c.healthy,
        COUNTS.c.unhealthy,
        COUNTS.c.unknown,
        COUNTS.c.devices,
        COUNTS.c.allocated,
    ):
        counters = counters + FIELD + cast(column, String)
    return (
        select(
            NODES.c.name,
            # In the database: converting thousands of timestamps in Python costs more than
            # the rest of a scrape.
            cast(extract("epoch", NODES.c.last_seen), Float),
            func.aggregate_strings(counters, RECORD),
        )
        .select_from(
            NODES.outerjoin(COUNTS, and_(COUNTS.c.node_id == NODES.c.id, COUNTS.c.devices > 0))
        )
        .group_by(NODES.c.id)
        .order_by(NODES.c.id)
    )


_NODE_ROWS = _node_rows_query()
# On PostgreSQL the rows are read from the driver's cursor: SQLAlchemy's result rows
# cost as much CPU again as the driver's reading, for a row per node at every read.
_NODE_ROWS_POSTGRESQL = _NODE_ROWS.compile(
    dialect=postgresql.dialect(), compile_kwargs={"render_postcompile": True}
)


def node_rows(session: Session) -> list[NodeRow]:
    """Every node with its per-resource counters, a row per node. The counters come as one
    text: a fleet has tens of thousands of (node, resource) rows, read every few seconds, and
    one text per node costs a third of the CPU to read; it is also what tells a node whose
    counters did not change since the last scrape."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        return session.execute(_NODE_ROWS).all()  # type: ignore[return-value]
    result = connection.exec_driver_sql(str(_NODE_ROWS_POSTGRESQL), _NODE_ROWS_POSTGRESQL.params)
    try:
        return result.cursor.fetchall()  # type: ignore[return-value]
    finally:
        result.close()


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
