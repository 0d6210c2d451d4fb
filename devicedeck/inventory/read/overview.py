"""The dashboard's own questions, which the JSON API does not ask: the overview's cluster
totals and nodes that need a look, and a node's devices laid out by resource and NUMA node.

Built on the same queries as the API (list_resources, list_devices, get_node), so a number on
a page is the number the API gives.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from devicedeck.inventory.dra.overview import UnhealthyDraDevices, dra_counts, unhealthy_dra_devices
from devicedeck.inventory.fields import HEALTHY, PRESENT, REMOVED
from devicedeck.inventory.models import Allocation, Device, DeviceCount, Node
from devicedeck.inventory.read.attention import needs_attention
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.queries import DeviceFilters, list_devices, resource_totals

COUNT_FIELDS = ("devices", "healthy", "unhealthy", "unknown", "allocated", "free")


def _zero() -> dict[str, int]:
    return dict.fromkeys(COUNT_FIELDS, 0)


def overview_picture(session: Session, clock: Freshness) -> dict[str, Any]:
    """Everything the overview shows but its charts' history and its event feed, read with
    one session at one moment (`clock.now`, the "now" of the charts too), so that no part of
    the page contradicts another."""
    dra_unhealthy = unhealthy_dra_devices(session)
    return {
        "at": clock.now.isoformat(),
        "summary": cluster_summary(session, clock, dra_unhealthy),
        "problems": needs_attention(session, clock, dra_unhealthy),
    }


def cluster_summary(
    session: Session, clock: Freshness, dra_unhealthy: list[UnhealthyDraDevices]
) -> dict[str, Any]:
    """Node totals, per-resource device totals and the sum over all resources, and the DRA
    devices' counts (`dra_unhealthy`: unhealthy_dra_devices).

    The per-resource numbers are list_resources' totals.
    """
    node_total, node_stale = session.execute(
        select(func.count(), func.sum(case((Node.last_seen < clock.cutoff, 1), else_=0)))
    ).one()
    per_resource = {item["resource"]: item["totals"] for item in resource_totals(session, clock)}
    totals = _zero()
    for row in per_resource.values():
        for field in COUNT_FIELDS:
            totals[field] += row[field]
    return {
        "nodes": {"total": int(node_total or 0), "stale": int(node_stale or 0)},
        "resources": [{"resource": name, **per_resource[name]} for name in sorted(per_resource)],
        "totals": totals,
        "dra": dra_counts(session, dra_unhealthy),
    }


# A node page shows at most this many present devices as tiles, and this many removed ones
# (collapsed); the device list, filtered to the node, pages through the rest.
NODE_TILE_LIMIT = 512
NODE_REMOVED_TILE_LIMIT = 64


def node_device_groups(
    session: Session, node: str, clock: Freshness, counts: dict[str, dict[str, int]]
) -> list[dict[str, Any]]:
    """The node page's devices by resource (see group_devices_by_resource_and_numa), each
    with the node's own counts (`counts`: get_node's per-resource counts) and how many tiles
    it shows. Present and removed devices are shown up to a limit each: removed devices are
    never deleted, so without one a node's page would grow with every device it ever had."""
    present = list_devices(session, DeviceFilters(node=node), clock, limit=NODE_TILE_LIMIT)
    removed = list_devices(
        session, DeviceFilters(node=node, state=REMOVED), clock, limit=NODE_REMOVED_TILE_LIMIT
    )
    removed_counts = {
        resource: int(n)
        for resource, n in session.execute(
            select(Device.resource, func.count())
            .where(Device.node_name == node, Device.state == REMOVED)
            .group_by(Device.resource)
        )
    }
    laid_out = {
        g["resource"]: g for g in group_devices_by_resource_and_numa(present.items + removed.items)
    }
    groups = []
    for resource in sorted(set(laid_out) | set(counts) | set(removed_counts)):
        group = laid_out.get(resource) or {"resource": resource, "groups": [], "removed": []}
        group["counts"] = {
            **(counts.get(resource) or _zero()),
            "removed": removed_counts.get(resource, 0),
        }
        group["tiles_shown"] = sum(len(g["devices"]) for g in group["groups"])
        groups.append(group)
    return groups


def pods_holding_devices_of(session: Session, node: str) -> list[dict[str, Any]]:
    """The pods holding a device of the node now, with how many each holds, by name."""
    rows = session.execute(
        select(
            Allocation.namespace, Allocation.pod, func.count(func.distinct(Allocation.device_pk))
        )
        .join(Node, Node.id == Allocation.node_id)
        .where(Node.name == node, Allocation.ended.is_(None))
        .group_by(Allocation.namespace, Allocation.pod)
        .order_by(Allocation.namespace, Allocation.pod)
    )
    return [{"namespace": ns, "pod": pod, "devices": int(n)} for ns, pod, n in rows]


def natural_key(text: str) -> list[Any]:
    """gpu-2 before gpu-10: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(text)]


_DIGITS = re.compile(r"(\d+)")


# Devices the plugin gave no topology sort after every numbered group.
_NO_TOPOLOGY_LAST = (1 << 30,)


def group_devices_by_resource_and_numa(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{resource, counts, groups: [{numa_nodes, devices}], removed: [devices]}]; removed devices
    are kept apart from the NUMA groups, in natural order.

    A device on several NUMA nodes gets its own group (numa_nodes [0, 1]); devices the plugin
    gave no topology form the group with no NUMA nodes, after the numbered groups.
    """
    by_resource: dict[str, dict[tuple[int, ...], list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {**_zero(), "removed": 0})
    removed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for device in devices:
        tally = counts[device["resource"]]
        if device["state"] != PRESENT:
            tally["removed"] += 1
            removed[device["resource"]].append(device)
            continue
        by_resource[device["resource"]][tuple(device["numa_nodes"])].append(device)
        tally["devices"] += 1
        tally[str(device["health"]).lower()] += 1
        if device["allocation"] is not None:
            tally["allocated"] += 1
        elif device["health"] == HEALTHY:
            tally["free"] += 1
    result = []
    for resource in sorted(set(by_resource) | set(removed)):
        groups: list[dict[str, Any]] = []
        for numa in sorted(by_resource[resource], key=lambda k: k or _NO_TOPOLOGY_LAST):
            members = sorted(by_resource[resource][numa], key=lambda d: natural_key(d["device_id"]))
            groups.append({"numa_nodes": list(numa), "devices": members})
        gone: list[dict[str, Any]] = removed[resource]
        gone.sort(key=lambda d: natural_key(d["device_id"]))
        result.append(
            {"resource": resource, "counts": counts[resource], "groups": groups, "removed": gone}
        )
    return result


def node_names(session: Session, limit: int = 500) -> list[str]:
    """Node names in order, for a filter's type-ahead."""
    return list(session.scalars(select(Node.name).order_by(Node.name).limit(limit)))


def resource_names(session: Session, limit: int = 500) -> list[str]:
    """Every resource name that has or had a device, for filter drop-downs."""
    # A counter row exists for every (node, resource) that ever had a device, removed or not:
    # a few thousand rows to read, not every device.
    return list(
        session.scalars(
            select(DeviceCount.resource).distinct().order_by(DeviceCount.resource).limit(limit)
        )
    )


def oldest_device_time(session: Session) -> datetime | None:
    """When the first device was seen: where the inventory's history starts."""
    oldest: datetime | None = session.scalar(select(func.min(Device.first_seen)))
    return oldest
