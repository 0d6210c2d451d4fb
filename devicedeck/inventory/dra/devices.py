"""DRA devices as the inventory shows them: driver/pool/device, where, and who consumes them.

Only a pool's newest generation counts, decided per slice (an empty newer slice hides the
older devices). A device is allocated as the scheduler sees it: by a claim result without
adminAccess. Devices with allNodes or a node selector belong to every node they can serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, false, func, or_, select
from sqlalchemy.orm import Session

from devicedeck.inventory.cluster.models import DraClaimDevice, DraDevice, DraDeviceHealth, DraSlice
from devicedeck.inventory.dra.rules import selector_matches
from devicedeck.inventory.dra.summary import summaries
from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.fields import HEALTH_VALUES, UNKNOWN
from devicedeck.inventory.models import Node
from devicedeck.inventory.read.pagination import Keyset, Page

_ORDER = Keyset(
    "driver,pool,device", [DraDevice.driver, DraDevice.pool, DraDevice.device, DraDevice.id]
)
NODE_DEVICE_LIMIT = 500


@dataclass(frozen=True)
class DraFilters:
    node: str | None = None
    driver: str | None = None
    pool: str | None = None
    allocated: bool | None = None
    # Healthy or Unhealthy as last reported; Unknown: nothing reported yet, or a health
    # stream saying the driver cannot tell.
    health: str | None = None


def newest_generation() -> ColumnElement[bool]:
    """Only slices of the highest generation of their pool count: older ones are leftovers
    a driver has not deleted yet, and their devices may be gone or renamed."""
    return ~exists().where(
        DraSlice.driver == DraDevice.driver,
        DraSlice.pool == DraDevice.pool,
        DraSlice.generation > DraDevice.pool_generation,
    )


def is_allocated() -> ColumnElement[bool]:
    return exists().where(
        DraClaimDevice.driver == DraDevice.driver,
        DraClaimDevice.pool == DraDevice.pool,
        DraClaimDevice.device == DraDevice.device,
        DraClaimDevice.admin_access.is_(False),
    )


def reported_health(health: str | None = None) -> ColumnElement[bool]:
    """A health report exists for the device (with this health, when given)."""
    conditions = [
        DraDeviceHealth.driver == DraDevice.driver,
        DraDeviceHealth.pool == DraDevice.pool,
        DraDeviceHealth.device == DraDevice.device,
    ]
    if health is not None:
        conditions.append(DraDeviceHealth.health == health)
    return exists().where(*conditions)


def _selected_by_node(session: Session, node: str) -> ColumnElement[bool]:
    """Devices the node can use: its own, every-node ones, and those whose selector picks it."""
    labels = session.scalar(select(Node.labels).where(Node.name == node)) or {}
    candidates = session.execute(
        select(DraDevice.id, DraDevice.node_selector)
        .where(
            DraDevice.node.is_(None),
            DraDevice.all_nodes.is_(False),
            newest_generation(),
        )
        .order_by(DraDevice.id)
    )
    chosen = [
        device_pk
        for device_pk, selector in candidates
        if isinstance(selector, dict) and selector_matches(selector, node, labels)
    ]
    return or_(
        DraDevice.node == node,
        DraDevice.all_nodes.is_(True),
        DraDevice.id.in_(chosen) if chosen else false(),
    )


def _conditions(session: Session, filters: DraFilters) -> list[ColumnElement[bool]]:
    conditions = [newest_generation()]
    if filters.node is not None:
        conditions.append(_selected_by_node(session, filters.node))
    if filters.driver is not None:
        conditions.append(DraDevice.driver == filters.driver)
    if filters.pool is not None:
        conditions.append(DraDevice.pool == filters.pool)
    if filters.health is not None and filters.health not in HEALTH_VALUES:
        raise InvalidInput(
            "health is not a health value",
            [Problem("health", "enum", f"must be one of {', '.join(HEALTH_VALUES)}")],
        )
    if filters.health == UNKNOWN:
        # No report yet, or a driver's health stream saying it cannot tell.
        conditions.append(~reported_health() | reported_health(UNKNOWN))
    elif filters.health is not None:
        conditions.append(reported_health(filters.health))
    if filters.allocated is True:
        conditions.append(is_allocated())
    elif filters.allocated is False:
        conditions.append(~is_allocated())
    return conditions


def list_dra_devices(
    session: Session, filters: DraFilters, *, cursor: str | None = None, limit: int = 50
) -> Page[dict[str, Any]]:
    conditions = _conditions(session, filters)
    query = _ORDER.page_query(select(DraDevice).where(*conditions), cursor, limit)
    devices, next_cursor = _ORDER.cut(
        session.scalars(query).all(), limit, lambda d: [d.driver, d.pool, d.device, d.id]
    )
    count = session.scalar(select(func.count()).select_from(DraDevice).where(*conditions))
    return Page(items=summaries(session, devices), next_cursor=next_cursor, count=count)


def dra_devices_of_node(session: Session, node: str) -> list[dict[str, Any]]:
    devices = session.scalars(
        select(DraDevice)
        .where(*_conditions(session, DraFilters(node=node)))
        .order_by(DraDevice.driver, DraDevice.pool, DraDevice.device, DraDevice.id)
        .limit(NODE_DEVICE_LIMIT)
    )
    return summaries(session, list(devices))


def dra_device_by_key(session: Session, driver: str, pool: str, device: str) -> DraDevice | None:
    """The device of the pool's newest generation with this name, if the driver publishes it."""
    return session.scalars(
        select(DraDevice)
        .where(
            and_(DraDevice.driver == driver, DraDevice.pool == pool, DraDevice.device == device),
            newest_generation(),
        )
        .order_by(DraDevice.id)
        .limit(1)
    ).one_or_none()
