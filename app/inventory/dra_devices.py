"""DRA devices as the inventory shows them: driver/pool/device, where, and who consumes them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, exists, func, select, tuple_
from sqlalchemy.orm import Session

from app.inventory.cluster_models import DraClaim, DraClaimDevice, DraDevice
from app.inventory.pages import Page, after_key, check_limit, decode_cursor, encode_cursor

SORT = "driver,pool,device"
NODE_DEVICE_LIMIT = 500


@dataclass(frozen=True)
class DraFilters:
    node: str | None = None
    driver: str | None = None
    pool: str | None = None
    allocated: bool | None = None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _newest_generation() -> ColumnElement[bool]:
    """Only slices of the highest generation of their pool count: older ones are leftovers
    a driver has not deleted yet, and their devices may be gone or renamed."""
    newer = DraDevice.__table__.alias("newer")
    return ~exists().where(
        newer.c.driver == DraDevice.driver,
        newer.c.pool == DraDevice.pool,
        newer.c.pool_generation > DraDevice.pool_generation,
    )


def _is_allocated() -> ColumnElement[bool]:
    return exists().where(
        DraClaimDevice.driver == DraDevice.driver,
        DraClaimDevice.pool == DraDevice.pool,
        DraClaimDevice.device == DraDevice.device,
    )


def _conditions(filters: DraFilters) -> list[ColumnElement[bool]]:
    conditions = [_newest_generation()]
    if filters.node is not None:
        conditions.append(DraDevice.node == filters.node)
    if filters.driver is not None:
        conditions.append(DraDevice.driver == filters.driver)
    if filters.pool is not None:
        conditions.append(DraDevice.pool == filters.pool)
    if filters.allocated is True:
        conditions.append(_is_allocated())
    elif filters.allocated is False:
        conditions.append(~_is_allocated())
    return conditions


def list_dra_devices(
    session: Session, filters: DraFilters, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    check_limit(limit)
    columns: list[Any] = [
        DraDevice.driver,
        DraDevice.pool,
        DraDevice.device,
        DraDevice.id,
    ]
    conditions = _conditions(filters)
    query = select(DraDevice).where(*conditions)
    if cursor:
        query = query.where(after_key(columns, decode_cursor(cursor, SORT, 4), False))
    devices = list(session.scalars(query.order_by(*columns).limit(limit + 1)))
    more = len(devices) > limit
    devices = devices[:limit]
    count = session.scalar(select(func.count()).select_from(DraDevice).where(*conditions))
    next_cursor = None
    if more and devices:
        last = devices[-1]
        next_cursor = encode_cursor(SORT, [last.driver, last.pool, last.device, last.id])
    return Page(items=with_claims(session, devices), next_cursor=next_cursor, count=count)


def dra_devices_of_node(session: Session, node: str) -> list[dict[str, Any]]:
    devices = session.scalars(
        select(DraDevice)
        .where(*_conditions(DraFilters(node=node)))
        .order_by(DraDevice.driver, DraDevice.pool, DraDevice.device, DraDevice.id)
        .limit(NODE_DEVICE_LIMIT)
    )
    return with_claims(session, list(devices))


def with_claims(session: Session, devices: list[DraDevice]) -> list[dict[str, Any]]:
    """Device summaries with the claims allocated each device and the pods consuming them."""
    claims: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    keys = sorted({(d.driver, d.pool, d.device) for d in devices})
    if keys:
        rows = session.execute(
            select(DraClaimDevice, DraClaim)
            .join(DraClaim, DraClaim.id == DraClaimDevice.claim_id)
            .where(
                tuple_(DraClaimDevice.driver, DraClaimDevice.pool, DraClaimDevice.device).in_(keys)
            )
            .order_by(DraClaim.namespace, DraClaim.name, DraClaimDevice.id)
        )
        for result, claim in rows:
            claims[(result.driver, result.pool, result.device)].append(
                {
                    "namespace": claim.namespace,
                    "name": claim.name,
                    "uid": claim.uid,
                    "request": result.request,
                    "share_id": result.share_id,
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
            )
    return [
        {
            "id": d.id,
            "driver": d.driver,
            "pool": d.pool,
            "device": d.device,
            "node": d.node,
            "slice": d.slice_name,
            "pool_generation": d.pool_generation,
            "attributes": d.attributes,
            "capacity": d.capacity,
            "taints": d.taints,
            "allocated": bool(claims.get((d.driver, d.pool, d.device))),
            "claims": claims.get((d.driver, d.pool, d.device), []),
            "updated_at": _iso(d.updated_at),
        }
        for d in devices
    ]
