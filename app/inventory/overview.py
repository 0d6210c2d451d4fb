"""The dashboard's own questions, which the JSON API does not ask: the overview's cluster
totals and nodes that need a look, and a node's devices laid out by resource and NUMA node.

Built on the same queries as the API (list_resources, list_devices, get_node), so a number on
a page is the number the API gives.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from app.inventory.dra_overview import dra_counts
from app.inventory.fields import HEALTHY, PRESENT, REMOVED
from app.inventory.freshness import Freshness
from app.inventory.models import Device, Node
from app.inventory.pages import MAX_LIMIT
from app.inventory.queries import DeviceFilters, device_counts, list_devices

COUNT_FIELDS = ("devices", "healthy", "unhealthy", "unknown", "allocated", "free")
# Devices removed this recently count as capacity the node lost; older removals are history.
CAPACITY_LOSS_WINDOW = timedelta(hours=24)
# Names in node capacity that are not extended resources (kubelet-managed, no device plugin).


def _zero() -> dict[str, int]:
    return dict.fromkeys(COUNT_FIELDS, 0)


def cluster_summary(session: Session, clock: Freshness) -> dict[str, Any]:
    """Node totals, per-resource device totals and the sum over all resources.

    The per-resource numbers are list_resources' totals (both sum device_counts), without the
    per-node breakdown the overview does not show.
    """
    node_total, node_stale = session.execute(
        select(func.count(), func.sum(case((Node.last_seen < clock.cutoff, 1), else_=0)))
    ).one()
    per_resource: dict[str, dict[str, int]] = defaultdict(lambda: {**_zero(), "nodes": 0})
    for (_node_id, resource), counts in device_counts(session, clock).items():
        row = per_resource[resource]
        row["nodes"] += 1
        for field in COUNT_FIELDS:
            row[field] += counts[field]
    totals = _zero()
    for row in per_resource.values():
        for field in COUNT_FIELDS:
            totals[field] += row[field]
    return {
        "nodes": {"total": int(node_total or 0), "stale": int(node_stale or 0)},
        "resources": [{"resource": name, **per_resource[name]} for name in sorted(per_resource)],
        "totals": totals,
        "dra": dra_counts(session),
    }


def nodes_needing_attention(
    session: Session, clock: Freshness, *, limit: int = 12, loss_window: timedelta | None = None
) -> dict[str, Any]:
    """Nodes that are stale, have unhealthy devices, or lost devices recently; worst first.

    Unhealthy counts are what the node last reported: a stale node's devices are shown as
    Unknown elsewhere, but the stale mark is the problem to fix first.
    """
    removed_since = clock.now - (loss_window or CAPACITY_LOSS_WINDOW)
    unhealthy = and_(Device.state == PRESENT, Device.health != HEALTHY)
    lost = and_(Device.state == REMOVED, Device.removed_at >= removed_since)
    rows = session.execute(
        select(
            Device.node_id,
            Device.resource,
            func.sum(case((unhealthy, 1), else_=0)),
            func.sum(case((lost, 1), else_=0)),
        )
        .where(
            (Device.state == PRESENT) & (Device.health != HEALTHY)
            | (Device.state == REMOVED) & (Device.removed_at >= removed_since)
        )
        .group_by(Device.node_id, Device.resource)
    ).all()
    per_node: dict[int, dict[str, Any]] = defaultdict(lambda: {"unhealthy": {}, "lost": {}})
    for node_id, resource, bad, gone in rows:
        if bad:
            per_node[node_id]["unhealthy"][resource] = int(bad)
        if gone:
            per_node[node_id]["lost"][resource] = int(gone)
    stale = {
        node_id: last_seen
        for node_id, last_seen in session.execute(
            select(Node.id, Node.last_seen).where(Node.last_seen < clock.cutoff)
        )
    }
    empty: dict[str, Any] = {"unhealthy": {}, "lost": {}}
    scores = {
        node_id: _severity(node_id in stale, per_node.get(node_id, empty))
        for node_id in set(stale) | set(per_node)
    }
    worst = sorted(scores, key=lambda node_id: (-scores[node_id], node_id))[:limit]
    nodes = (
        {
            node_id: (name, last_seen)
            for node_id, name, last_seen in session.execute(
                select(Node.id, Node.name, Node.last_seen).where(Node.id.in_(worst))
            )
        }
        if worst
        else {}
    )
    items = []
    for node_id in worst:
        name, last_seen = nodes[node_id]
        found = per_node.get(node_id, empty)
        items.append(
            {
                "name": name,
                "stale": node_id in stale,
                "last_seen": last_seen.isoformat(),
                "unhealthy": dict(sorted(found["unhealthy"].items())),
                "lost": dict(sorted(found["lost"].items())),
            }
        )
    items.sort(key=lambda item: (not item["stale"], -_out_of_service(item), item["name"]))
    return {"items": items, "count": len(scores)}


def _out_of_service(item: dict[str, Any]) -> int:
    return sum(item["unhealthy"].values()) + sum(item["lost"].values())


def _severity(stale: bool, found: dict[str, Any]) -> int:
    """Stale first (nothing on it is known), then by how many devices are out of service."""
    out = sum(found["unhealthy"].values()) + sum(found["lost"].values())
    return (1_000_000 if stale else 0) + out


def all_devices_of_node(session: Session, node: str, clock: Freshness) -> list[dict[str, Any]]:
    """Every device of a node, present and removed, following the keyset pages."""
    devices: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = list_devices(
            session,
            DeviceFilters(node=node, state="any"),
            clock,
            cursor=cursor,
            limit=MAX_LIMIT,
        )
        devices.extend(page.items)
        if page.next_cursor is None:
            return devices
        cursor = page.next_cursor


def natural_key(text: str) -> list[Any]:
    """gpu-2 before gpu-10: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(text)]


_DIGITS = re.compile(r"(\d+)")


def numa_label(numa_nodes: list[int]) -> str:
    if not numa_nodes:
        return "No NUMA affinity"
    return "NUMA " + " + ".join(str(n) for n in numa_nodes)


@dataclass(frozen=True)
class _GroupKey:
    order: tuple[int, ...]
    label: str


def group_devices_by_resource_and_numa(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{resource, counts, groups: [{label, devices}]}], removed devices last in their group.

    A device on several NUMA nodes gets its own group ("NUMA 0 + 1"); devices the plugin gave
    no topology go under "No NUMA affinity", after the numbered groups.
    """
    by_resource: dict[str, dict[_GroupKey, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {**_zero(), "removed": 0})
    for device in devices:
        numa = list(device["numa_nodes"])
        key = _GroupKey(tuple(numa) if numa else (1 << 30,), numa_label(numa))
        by_resource[device["resource"]][key].append(device)
        tally = counts[device["resource"]]
        if device["state"] != PRESENT:
            tally["removed"] += 1
            continue
        tally["devices"] += 1
        tally[str(device["health"]).lower()] += 1
        if device["allocation"] is not None:
            tally["allocated"] += 1
        elif device["health"] == HEALTHY:
            tally["free"] += 1
    result = []
    for resource in sorted(by_resource):
        groups = []
        for key in sorted(by_resource[resource], key=lambda k: k.order):
            members = sorted(
                by_resource[resource][key],
                key=lambda d: (d["state"] != PRESENT, natural_key(d["device_id"])),
            )
            groups.append({"label": key.label, "devices": members})
        result.append({"resource": resource, "counts": counts[resource], "groups": groups})
    return result


def node_names(session: Session, limit: int = 500) -> list[str]:
    """Node names in order, for a filter's type-ahead."""
    return list(session.scalars(select(Node.name).order_by(Node.name).limit(limit)))


def resource_names(session: Session, limit: int = 500) -> list[str]:
    """Every resource name that has or had a device, for filter drop-downs."""
    return list(
        session.scalars(select(Device.resource).distinct().order_by(Device.resource).limit(limit))
    )


def oldest_device_time(session: Session) -> datetime | None:
    """When the first device was seen: where the inventory's history starts."""
    oldest: datetime | None = session.scalar(select(func.min(Device.first_seen)))
    return oldest
