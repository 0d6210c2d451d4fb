"""DRA devices counted for the overview, and grouped by driver and pool for a node's page."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraDevice, DraSlice
from devicedeck.inventory.dra.devices import is_allocated, newest_generation, reported_health
from devicedeck.inventory.fields import UNHEALTHY


@dataclass(frozen=True)
class UnhealthyDraDevices:
    """How many devices of one pool are unhealthy, and the one node they are on (None for
    devices of every node or of a node selector)."""

    node: str | None
    driver: str
    pool: str
    count: int


def dra_counts(session: Session, unhealthy: list[UnhealthyDraDevices]) -> dict[str, int]:
    """Devices of every pool's newest generation: allocated as the scheduler counts it,
    unhealthy as last reported (`unhealthy`: unhealthy_dra_devices, read with the same
    session, so the overview's card and its list of problems are one count), free = neither;
    and pools still being published."""

    def count(*conditions: Any) -> int:
        query = select(func.count()).select_from(DraDevice).where(newest_generation(), *conditions)
        return int(session.scalar(query) or 0)

    return {
        "devices": count(),
        "allocated": count(is_allocated()),
        "unhealthy": sum(group.count for group in unhealthy),
        "free": count(~is_allocated(), ~reported_health(UNHEALTHY)),
        "incomplete_pools": len(incomplete_pools(session)),
    }


def unhealthy_dra_devices(session: Session) -> list[UnhealthyDraDevices]:
    """Devices of every pool's newest generation last reported Unhealthy, by node and pool."""
    rows = session.execute(
        select(DraDevice.node, DraDevice.driver, DraDevice.pool, func.count())
        .where(newest_generation(), reported_health(UNHEALTHY))
        .group_by(DraDevice.node, DraDevice.driver, DraDevice.pool)
        .order_by(DraDevice.driver, DraDevice.pool, DraDevice.node)
    )
    return [
        UnhealthyDraDevices(node=node, driver=driver, pool=pool, count=int(n))
        for node, driver, pool, n in rows
    ]


def incomplete_pools(session: Session) -> list[tuple[str, str]]:
    """Pools whose newest generation has fewer slices than its resourceSliceCount."""
    newest: dict[tuple[str, str], tuple[int, int, int]] = {}
    rows = session.execute(
        select(DraSlice.driver, DraSlice.pool, DraSlice.generation, DraSlice.slice_count).order_by(
            DraSlice.driver, DraSlice.pool, DraSlice.generation
        )
    )
    for driver, pool, generation, slice_count in rows:
        seen = newest.get((driver, pool))
        if seen is None or generation > seen[0]:
            newest[(driver, pool)] = (generation, 1, slice_count)
        elif generation == seen[0]:
            newest[(driver, pool)] = (generation, seen[1] + 1, max(seen[2], slice_count))
    return sorted(key for key, (_, slices, wanted) in newest.items() if slices < wanted)


def group_by_pool(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{driver, pool, state, counts, devices}] in the order the devices came (driver, pool)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(
        lambda: {"devices": 0, "allocated": 0, "unhealthy": 0, "free": 0}
    )
    for device in devices:
        key = (device["driver"], device["pool"])
        group = groups.setdefault(
            key,
            {
                "driver": device["driver"],
                "pool": device["pool"],
                "state": device.get("pool_state"),
                "devices": [],
            },
        )
        group["devices"].append(device)
        tally = counts[key]
        tally["devices"] += 1
        unhealthy = (device.get("health") or {}).get("health") == UNHEALTHY
        tally["allocated"] += device["allocated"]
        tally["unhealthy"] += unhealthy
        tally["free"] += not device["allocated"] and not unhealthy
    return [{**group, "counts": counts[key]} for key, group in groups.items()]
