"""What needs a look, for the overview: per node, and per DRA pool that no single node owns,
the devices out of service and why.

Counted with the rules of the overview's totals, so the list and the totals beside it agree:
a reporting node's devices by the health they reported, a stale node's devices as Unknown
(with what it reported last, apart), DRA devices by their last report. Every way a device is
out of service is counted in `_tally`; a new one (a state, a kind of device) goes there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.dra.overview import UnhealthyDraDevices
from devicedeck.inventory.fields import REMOVED
from devicedeck.inventory.models import Device, DeviceCount, Node
from devicedeck.inventory.read.freshness import Freshness

# Devices removed this recently count as capacity the node lost; older removals are history.
CAPACITY_LOSS_WINDOW = timedelta(hours=24)
SHOWN = 12
CHUNK = 1000
NODE = "node"
POOL = "pool"


@dataclass
class Place:
    """A node, or a DRA pool whose devices serve more than one node, and what is wrong there.

    Per plugin resource: `unhealthy` and `unknown` as the overview's totals count them,
    `unhealthy_when_seen` what a stale node reported last, `lost` devices removed within the
    loss window. `dra`: unhealthy DRA devices per (driver, pool)."""

    kind: str
    name: str
    stale: bool = False
    last_seen: datetime | None = None
    unhealthy: dict[str, int] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)
    unhealthy_when_seen: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    dra: dict[tuple[str, str], int] = field(default_factory=dict)

    def out_of_service(self) -> int:
        return sum(
            sum(counts.values()) for counts in (self.unhealthy, self.unknown, self.lost, self.dra)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "stale": self.stale,
            "last_seen": iso(self.last_seen),
            "unhealthy": dict(sorted(self.unhealthy.items())),
            "unknown": dict(sorted(self.unknown.items())),
            "unhealthy_when_seen": dict(sorted(self.unhealthy_when_seen.items())),
            "lost": dict(sorted(self.lost.items())),
            "dra": [
                {"driver": driver, "pool": pool, "unhealthy": count}
                for (driver, pool), count in sorted(self.dra.items())
            ],
        }


def needs_attention(
    session: Session,
    clock: Freshness,
    dra_unhealthy: list[UnhealthyDraDevices],
    *,
    limit: int = SHOWN,
    loss_window: timedelta | None = None,
) -> dict[str, Any]:
    """Places with a stale node or devices out of service, worst first: stale nodes (nothing
    on them is known), then by how many devices are out of service. `dra_unhealthy`:
    unhealthy_dra_devices, read with the same session."""
    places = _tally(session, clock, dra_unhealthy, loss_window or CAPACITY_LOSS_WINDOW)
    ranked = sorted(
        places.values(), key=lambda p: (not p.stale, -p.out_of_service(), p.kind, p.name)
    )
    shown = ranked[:limit]
    _fill_last_seen(session, shown)
    return {
        "items": [place.as_dict() for place in shown],
        "count": len(places),
        "nodes": sum(1 for p in places.values() if p.kind == NODE),
        "pools": sum(1 for p in places.values() if p.kind == POOL),
    }


def _tally(
    session: Session,
    clock: Freshness,
    dra_unhealthy: list[UnhealthyDraDevices],
    loss_window: timedelta,
) -> dict[tuple[str, str], Place]:
    places: dict[tuple[str, str], Place] = {}

    def at(kind: str, name: str) -> Place:
        return places.setdefault((kind, name), Place(kind=kind, name=name))

    stale = Node.last_seen < clock.cutoff
    names: dict[int, str] = {}
    for node_id, name, last_seen in session.execute(
        select(Node.id, Node.name, Node.last_seen).where(stale)
    ):
        names[node_id] = name
        place = at(NODE, name)
        place.stale, place.last_seen = True, last_seen
    # Counter rows with anything not Healthy, and every row of a stale node (all Unknown);
    # read without joining the nodes, then named, since few nodes have a problem.
    rows = session.execute(
        select(
            DeviceCount.node_id,
            DeviceCount.resource,
            DeviceCount.devices,
            DeviceCount.unhealthy,
            DeviceCount.unknown,
        ).where(
            DeviceCount.devices > 0,
            or_(
                DeviceCount.unhealthy > 0,
                DeviceCount.unknown > 0,
                DeviceCount.node_id.in_(select(Node.id).where(stale)),
            ),
        )
    ).all()
    names |= _names(session, {row[0] for row in rows} - names.keys())
    for node_id, resource, devices, unhealthy, unknown in rows:
        place = at(NODE, names[node_id])
        if place.stale:
            place.unknown[resource] = int(devices)
            if unhealthy:
                place.unhealthy_when_seen[resource] = int(unhealthy)
            continue
        if unhealthy:
            place.unhealthy[resource] = int(unhealthy)
        if unknown:
            place.unknown[resource] = int(unknown)
    removed_since = clock.now - loss_window
    for node, resource, gone in session.execute(
        select(Node.name, Device.resource, func.count())
        .join(Node, Node.id == Device.node_id)
        .where(Device.state == REMOVED, Device.removed_at >= removed_since)
        .group_by(Node.name, Device.resource)
    ):
        at(NODE, node).lost[resource] = int(gone)
    for group in dra_unhealthy:
        if group.node is not None:
            place = at(NODE, group.node)
        else:
            place = at(POOL, f"{group.driver}/{group.pool}")
        key = (group.driver, group.pool)
        place.dra[key] = place.dra.get(key, 0) + group.count
    return places


def _names(session: Session, node_ids: set[int]) -> dict[int, str]:
    ordered = sorted(node_ids)
    names: dict[int, str] = {}
    for chunk in (ordered[i : i + CHUNK] for i in range(0, len(ordered), CHUNK)):
        names.update(session.execute(select(Node.id, Node.name).where(Node.id.in_(chunk))).all())
    return names


def _fill_last_seen(session: Session, shown: list[Place]) -> None:
    """When each node shown last reported (stale ones have it already)."""
    nodes = {p.name: p for p in shown if p.kind == NODE and p.last_seen is None}
    if not nodes:
        return
    for name, last_seen in session.execute(
        select(Node.name, Node.last_seen).where(Node.name.in_(list(nodes)))
    ):
        nodes[name].last_seen = last_seen
