"""Read side of the inventory: one function per question, shared by the JSON API and the pages.

Functions return plain dicts ready for JSON, so the pages and the API show the same data.
Every list is ordered by a unique key and paged with keyset cursors.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    and_,
    case,
    exists,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.orm import Session

from app.clock import iso
from app.inventory.errors import InvalidInput, NotFound, Problem
from app.inventory.fields import HEALTH_VALUES, HEALTHY, PRESENT, REMOVED, UNHEALTHY, UNKNOWN
from app.inventory.freshness import Freshness
from app.inventory.history import device_history
from app.inventory.models import Allocation, Device, Node
from app.inventory.node_status import node_details
from app.inventory.pages import Keyset, Page

STATE_VALUES = (PRESENT, REMOVED, "any")


def effective_health(clock: Freshness) -> ColumnElement[str]:
    """A device on a node that stopped reporting is Unknown, whatever it last said."""
    return case((Node.last_seen < clock.cutoff, literal(UNKNOWN)), else_=Device.health)


def health_is(health: str, clock: Freshness) -> ColumnElement[bool]:
    """`effective_health(clock) == health`, written so the planner can estimate it: a CASE
    hides both columns from the statistics, and a misestimate turns joins into per-row probes."""
    fresh = Node.last_seen >= clock.cutoff
    if health == UNKNOWN:
        return or_(~fresh, Device.health == UNKNOWN)
    return and_(fresh, Device.health == health)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _invalid(field: str, rule: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field} {message}", [Problem(field, rule, message)])


def _sort_spec(sort: str, allowed: dict[str, Any]) -> tuple[str, bool]:
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key not in allowed:
        raise _invalid(
            "sort", "enum", f"must be one of {', '.join(sorted(allowed))}, '-' for descending"
        )
    return key, descending


# Devices -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceFilters:
    node: str | None = None
    node_prefix: str | None = None
    resource: str | None = None
    health: str | None = None
    allocated: bool | None = None
    namespace: str | None = None
    pod: str | None = None
    state: str = PRESENT
    q: str | None = None


def _current_allocation_of_device() -> Any:
    return exists().where(Allocation.device_pk == Device.id, Allocation.ended.is_(None))


def _device_conditions(filters: DeviceFilters, clock: Freshness) -> list[ColumnElement[bool]]:
    filters = replace(
        filters,
        health=canonical_choice(filters.health, HEALTH_VALUES),
        state=canonical_choice(filters.state, STATE_VALUES) or PRESENT,
    )
    if filters.health is not None and filters.health not in HEALTH_VALUES:
        raise _invalid("health", "enum", f"must be one of {', '.join(HEALTH_VALUES)}")
    if filters.state not in STATE_VALUES:
        raise _invalid("state", "enum", f"must be one of {', '.join(STATE_VALUES)}")
    conditions: list[ColumnElement[bool]] = []
    if filters.state != "any":
        conditions.append(Device.state == filters.state)
    if filters.node is not None:
        conditions.append(Node.name == filters.node)
    if filters.node_prefix:
        conditions.append(Node.name.startswith(filters.node_prefix, autoescape=True))
    if filters.resource is not None:
        conditions.append(Device.resource == filters.resource)
    if filters.health is not None:
        conditions.append(health_is(filters.health, clock))
    if filters.allocated is True:
        conditions.append(_current_allocation_of_device())
    elif filters.allocated is False:
        conditions.append(~_current_allocation_of_device())
    if filters.namespace is not None or filters.pod is not None:
        holder = [Allocation.device_pk == Device.id, Allocation.ended.is_(None)]
        if filters.namespace is not None:
            holder.append(Allocation.namespace == filters.namespace)
        if filters.pod is not None:
            holder.append(Allocation.pod == filters.pod)
        conditions.append(exists().where(*holder))
    if filters.q:
        conditions.append(Device.device_id.ilike(_like(filters.q), escape="\\"))
    return conditions


def _attention(health: ColumnElement[str]) -> ColumnElement[int]:
    """Unhealthy first, then Unknown, then Healthy: the order an operator reads them in."""
    return case((health == UNHEALTHY, 0), (health == UNKNOWN, 1), else_=2)


def _holder() -> Any:
    """ "namespace/pod" of the device's current holder, "" when it is free."""
    held_by = (
        select(func.min(Allocation.namespace + "/" + Allocation.pod))
        .where(Allocation.device_pk == Device.id, Allocation.ended.is_(None))
        .scalar_subquery()
    )
    return func.coalesce(held_by, "")


DEVICE_SORTS: dict[str, Any] = {
    "node": lambda h: [Node.name, Device.resource, Device.device_id, Device.id],
    "resource": lambda h: [Device.resource, Node.name, Device.device_id, Device.id],
    "device_id": lambda h: [Device.device_id, Device.id],
    "health": lambda h: [h, Node.name, Device.resource, Device.device_id, Device.id],
    "attention": lambda h: [_attention(h), Node.name, Device.resource, Device.device_id, Device.id],
    "health_since": lambda h: [
        func.coalesce(Device.health_changed_at, Device.first_seen),
        Device.id,
    ],
    "holder": lambda h: [_holder(), Node.name, Device.resource, Device.device_id, Device.id],
    "id": lambda h: [Device.id],
}


def canonical_choice(value: str | None, choices: tuple[str, ...]) -> str | None:
    """The choice `value` names, whatever its letter case ("unhealthy" is Unhealthy)."""
    if value is None:
        return None
    for choice in choices:
        if choice.lower() == value.lower():
            return choice
    return value


def list_devices(
    session: Session,
    filters: DeviceFilters,
    clock: Freshness,
    *,
    sort: str = "node",
    cursor: str | None = None,
    limit: int = 50,
) -> Page[dict[str, Any]]:
    key, descending = _sort_spec(sort, DEVICE_SORTS)
    health = effective_health(clock)
    columns = DEVICE_SORTS[key](health)
    order = Keyset(sort, columns, descending)
    conditions = _device_conditions(filters, clock)
    base = select(Device, Node.name, Node.last_seen).join(Node, Node.id == Device.node_id)
    query = order.page_query(base.where(*conditions).add_columns(*columns), cursor, limit)
    rows, next_cursor = order.cut(
        session.execute(query).all(), limit, lambda row: [_jsonable(v) for v in row[3:]]
    )
    count = session.scalar(
        select(func.count())
        .select_from(Device)
        .join(Node, Node.id == Device.node_id)
        .where(*conditions)
    )
    allocations = current_allocations_by_device(session, [row[0].id for row in rows])
    items = [
        device_summary(row[0], row[1], row[2], allocations.get(row[0].id), clock) for row in rows
    ]
    return Page(items=items, next_cursor=next_cursor, count=count)


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def current_allocations_by_device(session: Session, device_pks: list[int]) -> dict[int, Allocation]:
    if not device_pks:
        return {}
    found: dict[int, Allocation] = {}
    for allocation in session.scalars(
        select(Allocation)
        .where(Allocation.device_pk.in_(device_pks), Allocation.ended.is_(None))
        .order_by(Allocation.started, Allocation.id)
    ):
        found.setdefault(allocation.device_pk, allocation)
    return found


def allocation_summary(allocation: Allocation | None) -> dict[str, Any] | None:
    if allocation is None:
        return None
    return {
        "namespace": allocation.namespace,
        "pod": allocation.pod,
        "container": allocation.container,
        "pod_uid": allocation.pod_uid,
        "started": iso(allocation.started),
    }


def device_summary(
    device: Device,
    node_name: str,
    node_last_seen: datetime,
    allocation: Allocation | None,
    clock: Freshness,
) -> dict[str, Any]:
    stale = clock.is_stale(node_last_seen)
    return {
        "id": device.id,
        "node": node_name,
        "resource": device.resource,
        "device_id": device.device_id,
        "health": UNKNOWN if stale else device.health,
        "raw_health": device.raw_health,
        "health_source": "stale" if stale else device.health_source,
        "state": device.state,
        "numa_nodes": list(device.numa_nodes),
        "first_seen": iso(device.first_seen),
        "last_seen": iso(node_last_seen if device.state == PRESENT else device.last_seen),
        "removed_at": iso(device.removed_at),
        "health_changed_at": iso(device.health_changed_at),
        "node_stale": stale,
        "allocation": allocation_summary(allocation),
    }


def get_device(session: Session, device_pk: int, clock: Freshness) -> dict[str, Any]:
    """A device with its health history and allocation history, newest first."""
    row = session.execute(
        select(Device, Node.name, Node.last_seen)
        .join(Node, Node.id == Device.node_id)
        .where(Device.id == device_pk)
    ).one_or_none()
    if row is None:
        raise NotFound(f"no device with id {device_pk}")
    device, node_name, last_seen = row
    allocations = current_allocations_by_device(session, [device.id])
    summary = device_summary(device, node_name, last_seen, allocations.get(device.id), clock)
    summary.update(device_history(session, device.id))
    return summary


# Counts ------------------------------------------------------------------------------------


def _empty_counts() -> dict[str, int]:
    return {"devices": 0, "healthy": 0, "unhealthy": 0, "unknown": 0, "allocated": 0, "free": 0}


def device_counts(
    session: Session,
    clock: Freshness,
    node_ids: list[int] | None = None,
    resources: list[str] | None = None,
) -> dict[tuple[int, str], dict[str, int]]:
    """Counts of present devices per (node id, resource).

    free means healthy and not allocated: what a new pod could get.
    """
    health = effective_health(clock)
    held = select(Allocation.device_pk).where(Allocation.ended.is_(None)).distinct().subquery()
    allocated = held.c.device_pk.is_not(None)
    query = (
        select(
            Device.node_id,
            Device.resource,
            func.count(),
            func.sum(case((health == HEALTHY, 1), else_=0)),
            func.sum(case((health == UNHEALTHY, 1), else_=0)),
            func.sum(case((health == UNKNOWN, 1), else_=0)),
            func.sum(case((allocated, 1), else_=0)),
            func.sum(case((and_(health == HEALTHY, ~allocated), 1), else_=0)),
        )
        .join(Node, Node.id == Device.node_id)
        .outerjoin(held, held.c.device_pk == Device.id)
        .where(Device.state == PRESENT)
        .group_by(Device.node_id, Device.resource)
    )
    if node_ids is not None:
        if not node_ids:
            return {}
        query = query.where(Device.node_id.in_(node_ids))
    if resources is not None:
        query = query.where(Device.resource.in_(resources))
    counts: dict[tuple[int, str], dict[str, int]] = {}
    for node_id, resource, total, ok, bad, unknown, alloc, free in session.execute(query):
        counts[(node_id, resource)] = {
            "devices": int(total),
            "healthy": int(ok or 0),
            "unhealthy": int(bad or 0),
            "unknown": int(unknown or 0),
            "allocated": int(alloc or 0),
            "free": int(free or 0),
        }
    return counts


def devices_by_resource_and_health(
    session: Session, clock: Freshness
) -> list[tuple[str, str, int]]:
    health = effective_health(clock)
    rows = session.execute(
        select(Device.resource, health, func.count())
        .join(Node, Node.id == Device.node_id)
        .where(Device.state == PRESENT)
        .group_by(Device.resource, health)
        .order_by(Device.resource, health)
    )
    return [(resource, str(h), int(n)) for resource, h, n in rows]


# Nodes -------------------------------------------------------------------------------------


NODE_SORTS: dict[str, Any] = {
    "name": lambda: [Node.name],
    "last_seen": lambda: [Node.last_seen, Node.name],
}


@dataclass(frozen=True)
class NodeFilters:
    q: str | None = None
    stale: bool | None = None
    resource: str | None = None


def node_summary(
    node: Node, counts: dict[tuple[int, str], dict[str, int]], clock: Freshness
) -> dict[str, Any]:
    resources = {
        resource: value
        for (node_id, resource), value in sorted(counts.items())
        if node_id == node.id
    }
    return {
        "name": node.name,
        "first_seen": iso(node.first_seen),
        "last_seen": iso(node.last_seen),
        "stale": clock.is_stale(node.last_seen),
        "resources": resources,
    }


def list_nodes(
    session: Session,
    filters: NodeFilters,
    clock: Freshness,
    *,
    sort: str = "name",
    cursor: str | None = None,
    limit: int = 50,
) -> Page[dict[str, Any]]:
    key, descending = _sort_spec(sort, NODE_SORTS)
    order = Keyset(sort, NODE_SORTS[key](), descending)
    conditions: list[ColumnElement[bool]] = []
    if filters.q:
        conditions.append(Node.name.ilike(_like(filters.q), escape="\\"))
    if filters.stale is True:
        conditions.append(Node.last_seen < clock.cutoff)
    elif filters.stale is False:
        conditions.append(Node.last_seen >= clock.cutoff)
    if filters.resource:
        conditions.append(
            exists().where(
                Device.node_id == Node.id,
                Device.resource == filters.resource,
                Device.state == PRESENT,
            )
        )
    query = order.page_query(select(Node).where(*conditions), cursor, limit)
    nodes, next_cursor = order.cut(
        session.scalars(query).all(),
        limit,
        lambda n: [n.name] if key == "name" else [n.last_seen.isoformat(), n.name],
    )
    count = session.scalar(select(func.count()).select_from(Node).where(*conditions))
    counts = device_counts(session, clock, [n.id for n in nodes])
    return Page(
        items=[node_summary(n, counts, clock) for n in nodes], next_cursor=next_cursor, count=count
    )


def get_node(session: Session, name: str, clock: Freshness) -> dict[str, Any]:
    node = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    if node is None:
        raise NotFound(f"no node named {name!r}")
    summary = node_summary(node, device_counts(session, clock, [node.id]), clock)
    summary.update(node_details(session, node))
    return summary


# Resources ---------------------------------------------------------------------------------


_BY_RESOURCE = Keyset("resource", [Device.resource])


def list_resources(
    session: Session, clock: Freshness, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """Per resource name: cluster-wide totals and the per-node breakdown."""
    names_query = _BY_RESOURCE.page_query(
        select(Device.resource).where(Device.state == PRESENT).distinct(), cursor, limit
    )
    names, next_cursor = _BY_RESOURCE.cut(session.scalars(names_query).all(), limit, lambda n: [n])
    count = session.scalar(
        select(func.count(func.distinct(Device.resource))).where(Device.state == PRESENT)
    )
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    totals: dict[str, dict[str, int]] = defaultdict(_empty_counts)
    if names:
        node_names: dict[int, str] = {
            node_id: name
            for node_id, name in session.execute(
                select(Node.id, Node.name).where(
                    exists().where(
                        Device.node_id == Node.id,
                        Device.resource.in_(names),
                        Device.state == PRESENT,
                    )
                )
            )
        }
        counts = device_counts(session, clock, resources=names)
        for (node_id, resource), value in counts.items():
            per_node[resource].append({"node": node_names[node_id], **value})
            for field, number in value.items():
                totals[resource][field] += number
    items: list[dict[str, Any]] = [
        {
            "resource": name,
            "totals": {**totals[name], "nodes": len(per_node[name])},
            "nodes": sorted(per_node[name], key=lambda entry: str(entry["node"])),
        }
        for name in names
    ]
    return Page(items=items, next_cursor=next_cursor, count=count)
