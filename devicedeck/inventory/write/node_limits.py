"""The most devices one node may have: a bound on what one node's agent can make the service
store, whatever its snapshots say."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devicedeck.inventory.errors import InvalidInput, Problem
from devicedeck.inventory.fields import PRESENT
from devicedeck.inventory.models import Device


def check_node_device_limit(
    session: Session,
    node_id: int,
    *,
    field: str,
    incoming: int,
    limit: int | None,
    other_than_resource: str | None = None,
) -> None:
    """Refuse a snapshot that would leave the node with more than `limit` present devices.

    `incoming` devices join the node's present ones (of every resource but
    `other_than_resource`, whose list the snapshot replaces). Called only when a snapshot
    creates devices, so snapshots that change health or holders pay nothing for it."""
    if limit is None:
        return
    query = select(func.count()).where(Device.node_id == node_id, Device.state == PRESENT)
    if other_than_resource is not None:
        query = query.where(Device.resource != other_than_resource)
    check_device_total((session.scalar(query) or 0) + incoming, field=field, limit=limit)


def check_device_total(total: int, *, field: str, limit: int | None) -> None:
    """Refuse a snapshot that would leave its node with `total` present devices, when that is
    over `limit`: for a caller that counted them itself."""
    if limit is not None and total > limit:
        why = f"would give the node {total} devices; one node may have at most {limit}"
        raise InvalidInput(
            "snapshot is over the per-node device limit",
            [Problem(field, "max_devices_per_node", why)],
        )
