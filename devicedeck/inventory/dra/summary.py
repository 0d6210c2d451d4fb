"""One DRA device as the API and pages show it: its claims (each share of a shared device),
the admin-access claims watching it, the capacity left, its pool's state and its health."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.cluster.models import (
    DraClaim,
    DraClaimDevice,
    DraDevice,
    DraDeviceHealth,
    DraSlice,
)
from devicedeck.inventory.dra.rules import format_quantity, parse, selector_matches
from devicedeck.inventory.models import Node

# A selector device lists at most this many of the nodes it can serve.
NODES_LISTED = 100

Key = tuple[str, str, str]
PoolKey = tuple[str, str]


def _objects(stored: list[Any] | None) -> list[dict[str, Any]]:
    """Conditions and taints are kept as the API server gave them; only objects can be
    read as one."""
    return [item for item in stored or [] if isinstance(item, dict)]


def _claim_ref(result: DraClaimDevice, claim: DraClaim) -> dict[str, Any]:
    return {
        "namespace": claim.namespace,
        "name": claim.name,
        "uid": claim.uid,
        "request": result.request,
        "share_id": result.share_id,
        "admin_access": result.admin_access,
        "consumed_capacity": result.consumed_capacity,
        "conditions": _objects(result.conditions),
        "consumers": [
            {
                "namespace": claim.namespace,
                "name": consumer.get("name"),
                "uid": consumer.get("uid"),
                "resource": consumer.get("resource"),
            }
            for consumer in claim.reserved_for
        ],
    }


def claims_by_device(session: Session, keys: list[Key]) -> dict[Key, list[dict[str, Any]]]:
    claims: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    if not keys:
        return claims
    rows = session.execute(
        select(DraClaimDevice, DraClaim)
        .join(DraClaim, DraClaim.id == DraClaimDevice.claim_id)
        .where(tuple_(DraClaimDevice.driver, DraClaimDevice.pool, DraClaimDevice.device).in_(keys))
        .order_by(DraClaim.namespace, DraClaim.name, DraClaimDevice.id)
    )
    for result, claim in rows:
        claims[(result.driver, result.pool, result.device)].append(_claim_ref(result, claim))
    return claims


def _short(name: str, driver: str) -> str:
    """Capacity names may leave out the driver's own domain."""
    prefix = f"{driver}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def capacity_left(device: DraDevice, holders: list[dict[str, Any]]) -> dict[str, Any]:
    """Each capacity with what the device's shares consume and what is left. A device that
    is not shareable has the same shape, with neither (None): pages and the API read one
    shape whatever the device."""
    shaped = {
        name: {**entry, "consumed": None, "available": None}
        for name, entry in device.capacity.items()
    }
    if not device.allow_multiple:
        return shaped
    consumed: dict[str, Decimal] = defaultdict(Decimal)
    for holder in holders:
        for name, amount in (holder.get("consumed_capacity") or {}).items():
            parsed = parse(amount)
            if parsed is not None:
                consumed[_short(name, device.driver)] += parsed
    for name, entry in shaped.items():
        total = parse(entry.get("value"))
        used = consumed.get(_short(name, device.driver), Decimal(0))
        like = str(entry.get("value") or "")
        entry["consumed"] = format_quantity(used, like)
        entry["available"] = format_quantity(total - used, like) if total is not None else None
    return shaped


def pool_states(session: Session, pools: list[PoolKey]) -> dict[PoolKey, dict[str, Any]]:
    """Per pool: its newest generation, how many slices of it are here, and how many the
    driver says there are (resourceSliceCount); fewer means the pool is being published."""
    states: dict[PoolKey, dict[str, Any]] = {}
    if not pools:
        return states
    slices = session.execute(
        select(DraSlice.driver, DraSlice.pool, DraSlice.generation, DraSlice.slice_count)
        .where(tuple_(DraSlice.driver, DraSlice.pool).in_(pools))
        .order_by(DraSlice.driver, DraSlice.pool, DraSlice.generation.desc())
    )
    for driver, pool, generation, count in slices:
        state = states.get((driver, pool))
        if state is None:
            states[(driver, pool)] = {
                "generation": generation,
                "slices": 1,
                "slice_count": count,
            }
        elif state["generation"] == generation:
            state["slices"] += 1
            state["slice_count"] = max(state["slice_count"], count)
    for state in states.values():
        state["complete"] = state["slices"] >= state["slice_count"]
    return states


def health_by_device(session: Session, keys: list[Key]) -> dict[Key, dict[str, Any]]:
    if not keys:
        return {}
    rows = session.scalars(
        select(DraDeviceHealth).where(
            tuple_(DraDeviceHealth.driver, DraDeviceHealth.pool, DraDeviceHealth.device).in_(keys)
        )
    )
    return {
        (row.driver, row.pool, row.device): {
            "health": row.health,
            "raw_health": row.raw_health,
            "source": row.health_source,
            "reported_by": row.reported_by,
            "message": row.message,
            "changed_at": iso(row.changed_at),
        }
        for row in rows
    }


def _serving_nodes(session: Session, devices: list[DraDevice]) -> dict[int, list[str]]:
    selective = [d for d in devices if d.node is None and not d.all_nodes and d.node_selector]
    if not selective:
        return {}
    known = session.execute(select(Node.name, Node.labels).order_by(Node.name)).all()
    serving: dict[int, list[str]] = {}
    for device in selective:
        assert device.node_selector is not None
        matched = [
            name for name, labels in known if selector_matches(device.node_selector, name, labels)
        ]
        serving[device.id] = matched[:NODES_LISTED]
    return serving


def summaries(session: Session, devices: list[DraDevice]) -> list[dict[str, Any]]:
    keys = sorted({(d.driver, d.pool, d.device) for d in devices})
    claims = claims_by_device(session, keys)
    pools = pool_states(session, sorted({(d.driver, d.pool) for d in devices}))
    health = health_by_device(session, keys)
    serving = _serving_nodes(session, devices)
    items = []
    for d in devices:
        key = (d.driver, d.pool, d.device)
        holders = [c for c in claims.get(key, []) if not c["admin_access"]]
        watchers = [c for c in claims.get(key, []) if c["admin_access"]]
        items.append(
            {
                "id": d.id,
                "driver": d.driver,
                "pool": d.pool,
                "device": d.device,
                "node": d.node,
                "all_nodes": d.all_nodes,
                "node_selector": d.node_selector,
                "nodes": [d.node] if d.node else serving.get(d.id, []),
                "slice": d.slice_name,
                "pool_generation": d.pool_generation,
                "pool_state": pools.get((d.driver, d.pool)),
                "attributes": d.attributes,
                "capacity": capacity_left(d, holders),
                "taints": _objects(d.taints),
                "shared": d.allow_multiple,
                "allocated": bool(holders),
                "claims": holders,
                "watched_by": watchers,
                "health": health.get(key),
                "updated_at": iso(d.updated_at),
            }
        )
    return items
