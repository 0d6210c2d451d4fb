"""Read side of the inventory: one function per question, shared by the JSON API and the pages.

Functions return plain dicts ready for JSON, so the pages and the API show the same data.
Every list is ordered by a unique key and paged with keyset cursors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    case,
    cast,
    exists,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from devicedeck.clock import iso
from devicedeck.inventory.cluster.node_state import kube_node_state
from devicedeck.inventory.errors import InvalidInput, NotFound, Problem
from devicedeck.inventory.fields import (
    HEALTH_VALUES,
    PRESENT,
    REMOVED,
    UNHEALTHY,
    UNHEALTHY_OR_REMOVED,
    UNKNOWN,
    numa_nodes_of,
)
from devicedeck.inventory.models import Allocation, Device, DeviceCount, Node
from devicedeck.inventory.read.filter_counts import counted_present_devices
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.health_order import (
    ATTENTION_SORT,
    HEALTH_SORT,
    cursor_position,
    health_first_query,
)
from devicedeck.inventory.read.history import device_history
from devicedeck.inventory.read.node_status import node_details
from devicedeck.inventory.read.pagination import (
    Keyset,
    Page,
    after_key,
    among,
    bounded_count,
    check_limit,
    decode_cursor,
)
from devicedeck.inventory.write.derived_health import REMOVED_BY_CAPACITY_DETAIL, health_detail

STATE_VALUES = (PRESENT, REMOVED, UNHEALTHY_OR_REMOVED, "any")


def presence_of(state: str, uncertain: bool) -> str:
    """What the API says of a device's presence: present, removed, or unhealthy_or_removed."""
    return UNHEALTHY_OR_REMOVED if state == PRESENT and uncertain else state


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
    if filters.state == UNHEALTHY_OR_REMOVED:
        conditions += [Device.state == PRESENT, Device.presence_uncertain.is_(True)]
    elif filters.state != "any":
        conditions.append(Device.state == filters.state)
    if filters.node is not None:
        conditions.append(Device.node_name == filters.node)
    if filters.node_prefix:
        conditions.append(Device.node_name.startswith(filters.node_prefix, autoescape=True))
    if filters.resource is not None:
        conditions.append(Device.resource == filters.resource)
    if filters.health is not None:
        conditions.append(health_is(filters.health, clock))
    # held: the device's current allocations, kept by the database (migration 0005).
    if filters.allocated is True:
        conditions.append(Device.held > 0)
    elif filters.allocated is False:
        conditions.append(Device.held == 0)
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


# Device.node_name rather than Node.name: the same value, in an index with the other keys.
DEVICE_SORTS: dict[str, Any] = {
    "node": lambda h: [Device.node_name, Device.resource, Device.device_id, Device.id],
    "resource": lambda h: [Device.resource, Device.node_name, Device.device_id, Device.id],
    "device_id": lambda h: [Device.device_id, Device.id],
    "health": lambda h: [h, Device.node_name, Device.resource, Device.device_id, Device.id],
    "attention": lambda h: [
        _attention(h),
        Device.node_name,
        Device.resource,
        Device.device_id,
        Device.id,
    ],
    "health_since": lambda h: [
        func.coalesce(Device.health_changed_at, Device.first_seen),
        Device.id,
    ],
    "holder": lambda h: [_holder(), Device.node_name, Device.resource, Device.device_id, Device.id],
    "id": lambda h: [Device.id],
}
# Sorts whose first key is the effective health: read range by range (health_order.py).
HEALTH_FIRST_SORTS = {"health": HEALTH_SORT, "attention": ATTENTION_SORT}


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
    base = select(*SUMMARY_COLUMNS).join(Node, Node.id == Device.node_id)
    # SQLite plans the ranges' union worse than the one sort (3 times slower at 40,000
    # devices): it keeps the sort there.
    if key in HEALTH_FIRST_SORTS and session.get_bind().dialect.name == "postgresql":
        ranked = health_first_query(
            HEALTH_FIRST_SORTS[key],
            sort,
            descending,
            conditions,
            canonical_choice(filters.health, HEALTH_VALUES),
            clock,
            cursor,
            limit,
        )
        found = [] if ranked is None else session.execute(_page_of(base, ranked, descending)).all()
    else:
        if key in HEALTH_FIRST_SORTS and cursor:  # the same cursors as PostgreSQL takes
            cursor_position(HEALTH_FIRST_SORTS[key], sort, descending, cursor)
        query = order.page_query(base.where(*conditions).add_columns(*columns), cursor, limit)
        found = session.execute(query).all()
    rows, next_cursor = order.cut(
        found, limit, lambda row: [_jsonable(v) for v in row[SUMMARY_WIDTH:]]
    )
    matching = select(Device.id).where(*conditions)
    if filters.health is not None:  # only the health filter reads the node (its last_seen)
        matching = matching.join(Node, Node.id == Device.node_id)
    count, exact = bounded_count(session, matching, known=_counted(session, filters, clock))
    allocations = current_allocations_by_device(session, [row[0] for row in rows])
    items = [device_summary(row, allocations.get(row[0]), clock) for row in rows]
    return Page(items=items, next_cursor=next_cursor, count=count, count_exact=exact)


def _counted(session: Session, filters: DeviceFilters, clock: Freshness) -> int | None:
    """The number of matches from the counters, for the filters that can match more devices
    than a count should read (resource, health, holder or not), where the counters count by
    every filter set; None otherwise."""
    health = canonical_choice(filters.health, HEALTH_VALUES)
    state = canonical_choice(filters.state, STATE_VALUES) or PRESENT
    if state != PRESENT or filters.namespace is not None or filters.pod is not None or filters.q:
        return None
    if filters.resource is None and health is None and filters.allocated is None:
        return None  # counting up to the limit walks an index of present devices: cheaper
    return counted_present_devices(
        session,
        clock,
        node=filters.node,
        node_prefix=filters.node_prefix,
        resource=filters.resource,
        health=health,
        allocated=filters.allocated,
    )


def _page_of(base: Select[Any], ranked: Select[Any], descending: bool) -> Select[Any]:
    """The rows of `base` whose ids `ranked` gives, with its key columns, in its order."""
    page = ranked.subquery()
    keys = [column for column in page.c if column.key != "id"]
    return (
        base.join(page, page.c.id == Device.id)
        .add_columns(*keys)
        .order_by(*(key.desc() if descending else key for key in keys))
    )


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def current_allocations_by_device(session: Session, device_pks: list[int]) -> dict[int, Any]:
    """Each device's current allocation (its first, when several pods share it), as a row of
    ALLOCATION_SUMMARY_COLUMNS."""
    if not device_pks:
        return {}
    found: dict[int, Any] = {}
    for allocation in session.execute(
        select(*ALLOCATION_SUMMARY_COLUMNS)
        .where(among(session, Allocation.device_pk, device_pks), Allocation.ended.is_(None))
        .order_by(Allocation.started, Allocation.id)
    ):
        found.setdefault(allocation[0], allocation)
    return found


ALLOCATION_SUMMARY_COLUMNS = (
    Allocation.device_pk,
    Allocation.namespace,
    Allocation.pod,
    Allocation.container,
    Allocation.pod_uid,
    Allocation.started,
)


def allocation_summary(allocation: Sequence[Any] | None) -> dict[str, Any] | None:
    """A row of ALLOCATION_SUMMARY_COLUMNS as the API shows it."""
    if allocation is None:
        return None
    _, namespace, pod, container, pod_uid, started = allocation
    return {
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "pod_uid": pod_uid,
        "started": iso(started),
    }


# What a device's summary reads, as plain columns read by position: ORM objects, and rows'
# attributes, cost more than the rest of a page of 500 devices.
SUMMARY_COLUMNS = (
    Device.id,
    Device.resource,
    Device.device_id,
    Device.health,
    Device.raw_health,
    Device.health_source,
    Device.state,
    # As its JSON text: a page has a handful of distinct values, decoded once each.
    cast(Device.numa_nodes, Text),
    Device.first_seen,
    Device.last_seen,
    Device.removed_at,
    Device.removed_by_capacity,
    Device.health_changed_at,
    Device.presence_uncertain,
    Node.name,
    Node.last_seen,
    Node.capacity,
    Node.allocatable,
)
SUMMARY_WIDTH = len(SUMMARY_COLUMNS)


def device_summary(
    row: Sequence[Any], allocation: Sequence[Any] | None, clock: Freshness
) -> dict[str, Any]:
    """A device as the API shows it, from a row starting with SUMMARY_COLUMNS and its current
    allocation (a row of ALLOCATION_SUMMARY_COLUMNS, or None)."""
    (
        pk,
        resource,
        device_id,
        health,
        raw_health,
        health_source,
        state,
        numa_nodes,
        first_seen,
        last_seen,
        removed_at,
        removed_by_capacity,
        health_changed_at,
        presence_uncertain,
        node,
        node_last_seen,
        node_capacity,
        node_allocatable,
    ) = row[:SUMMARY_WIDTH]
    stale = node_last_seen < clock.cutoff
    detail = None
    if state != PRESENT:
        detail = REMOVED_BY_CAPACITY_DETAIL if removed_by_capacity else None
    elif not stale:
        detail = health_detail(
            health_source,
            health,
            node_capacity,
            node_allocatable,
            resource,
            uncertain=presence_uncertain,
        )
    return {
        "id": pk,
        "node": node,
        "resource": resource,
        "device_id": device_id,
        "health": UNKNOWN if stale else health,
        "raw_health": raw_health,
        "health_source": "stale" if stale else health_source,
        "health_detail": detail,
        "state": state,
        "presence": presence_of(state, presence_uncertain),
        "numa_nodes": list(numa_nodes_of(numa_nodes)),
        "first_seen": iso(first_seen),
        "last_seen": iso(node_last_seen if state == PRESENT else last_seen),
        "removed_at": iso(removed_at),
        "health_changed_at": iso(health_changed_at),
        "node_stale": stale,
        "allocation": allocation_summary(allocation),
    }


def get_device(session: Session, device_pk: int, clock: Freshness) -> dict[str, Any]:
    """A device with its health history and allocation history, newest first."""
    row = session.execute(
        select(*SUMMARY_COLUMNS).join(Node, Node.id == Device.node_id).where(Device.id == device_pk)
    ).one_or_none()
    if row is None:
        raise NotFound(f"no device with id {device_pk}")
    pk = row[0]
    summary = device_summary(row, current_allocations_by_device(session, [pk]).get(pk), clock)
    summary.update(device_history(session, pk))
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
    """Counts of present devices per (node id, resource), from the counters the database keeps
    (DeviceCount). A stale node's devices are Unknown, and so none of them is free.

    free means healthy and not allocated: what a new pod could get.
    """
    query = select(DeviceCount, Node.last_seen).join(Node, Node.id == DeviceCount.node_id)
    if node_ids is not None:
        if not node_ids:
            return {}
        query = query.where(DeviceCount.node_id.in_(node_ids))
    if resources is not None:
        query = query.where(DeviceCount.resource.in_(resources))
    counts: dict[tuple[int, str], dict[str, int]] = {}
    for row, last_seen in session.execute(query.where(DeviceCount.devices > 0)):
        stale = clock.is_stale(last_seen)
        counts[(row.node_id, row.resource)] = {
            "devices": row.devices,
            "healthy": 0 if stale else row.healthy,
            "unhealthy": 0 if stale else row.unhealthy,
            "unknown": row.devices if stale else row.unknown,
            "allocated": row.allocated,
            "free": 0 if stale else row.free,
        }
    return counts


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


def counts_by_node(
    counts: dict[tuple[int, str], dict[str, int]],
) -> dict[int, dict[str, dict[str, int]]]:
    """`device_counts`' answer per node id, each node's resources in name order."""
    grouped: dict[int, dict[str, dict[str, int]]] = {}
    for (node_id, resource), value in sorted(counts.items()):
        grouped.setdefault(node_id, {})[resource] = value
    return grouped


def node_summary(
    node: Node, resources: dict[str, dict[str, int]], clock: Freshness
) -> dict[str, Any]:
    """A node as the API shows it, with its per-resource counts (from `counts_by_node`)."""
    return {
        "name": node.name,
        "first_seen": iso(node.first_seen),
        "last_seen": iso(node.last_seen),
        "stale": clock.is_stale(node.last_seen),
        "resources": resources,
        "kubernetes": kube_node_state(node),
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
        # A node with a present device of the resource: its counter row says so (devices
        # counts present ones), one index lookup where the devices would be many.
        conditions.append(
            exists().where(
                DeviceCount.node_id == Node.id,
                DeviceCount.resource == filters.resource,
                DeviceCount.devices > 0,
            )
        )
    query = order.page_query(select(Node).where(*conditions), cursor, limit)
    nodes, next_cursor = order.cut(
        session.scalars(query).all(),
        limit,
        lambda n: [n.name] if key == "name" else [n.last_seen.isoformat(), n.name],
    )
    count = session.scalar(select(func.count()).select_from(Node).where(*conditions))
    counts = counts_by_node(device_counts(session, clock, [n.id for n in nodes]))
    return Page(
        items=[node_summary(n, counts.get(n.id, {}), clock) for n in nodes],
        next_cursor=next_cursor,
        count=count,
    )


def get_node(session: Session, name: str, clock: Freshness) -> dict[str, Any]:
    node = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    if node is None:
        raise NotFound(f"no node named {name!r}")
    counts = counts_by_node(device_counts(session, clock, [node.id]))
    summary = node_summary(node, counts.get(node.id, {}), clock)
    summary.update(node_details(session, node))
    return summary


# Resources ---------------------------------------------------------------------------------


def resource_totals(
    session: Session, clock: Freshness, *, after: list[Any] | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Per resource name, in name order: cluster-wide counts of present devices and the number
    of nodes that have any, summed over the counters the database keeps."""
    fresh = Node.last_seen >= clock.cutoff

    def when_fresh(column: Any) -> Any:
        return func.sum(case((fresh, column), else_=0))

    query = (
        select(
            DeviceCount.resource,
            func.sum(DeviceCount.devices),
            when_fresh(DeviceCount.healthy),
            when_fresh(DeviceCount.unhealthy),
            func.sum(case((fresh, DeviceCount.unknown), else_=DeviceCount.devices)),
            func.sum(DeviceCount.allocated),
            when_fresh(DeviceCount.free),
            func.count(),
        )
        .join(Node, Node.id == DeviceCount.node_id)
        .where(DeviceCount.devices > 0)
        .group_by(DeviceCount.resource)
        .order_by(DeviceCount.resource)
    )
    if after is not None:
        query = query.where(after_key([DeviceCount.resource], after, False))
    if limit is not None:
        query = query.limit(limit)
    fields = (*_empty_counts(), "nodes")
    return [
        {
            "resource": row[0],
            "totals": dict(zip(fields, (int(n or 0) for n in row[1:]), strict=True)),
        }
        for row in session.execute(query)
    ]


def list_resources(
    session: Session, clock: Freshness, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    """Per resource name: cluster-wide totals. Per-node counts are on the nodes
    (`list_nodes` with a resource filter), paged like every other list."""
    check_limit(limit)
    after = decode_cursor(cursor, "resource", 1) if cursor else None
    found = resource_totals(session, clock, after=after, limit=limit + 1)
    items, next_cursor = Keyset("resource", [DeviceCount.resource]).cut(
        found, limit, lambda item: [item["resource"]]
    )
    count = session.scalar(
        select(func.count(func.distinct(DeviceCount.resource))).where(DeviceCount.devices > 0)
    )
    return Page(items=items, next_cursor=next_cursor, count=count)
