"""Per resource over time: present devices, healthy devices and allocated devices.

Rebuilt from the event log by starting at the current state and undoing events newest first,
so the cost is the number of events in the window, not the age of the cluster. Healthy means
what the pages mean: reported Healthy on a node that is not stale.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from devicedeck.inventory.fields import HEALTHY, PRESENT
from devicedeck.inventory.models import Allocation, Device, Event, Node
from devicedeck.inventory.read.freshness import Freshness

WINDOWS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
DEFAULT_WINDOW = "24h"
DEFAULT_POINTS = 96
SERIES = ("devices", "healthy", "allocated")

DEVICE_KINDS = (
    "device_added",
    "device_removed",
    "device_reappeared",
    "health_changed",
    "allocated",
    "released",
)
NODE_KINDS = ("node_stale", "node_seen")
_CHUNK = 500
_BULK = 2000  # above this many devices, one pass over all of them beats many IN lists


@dataclass
class _DeviceState:
    node: str
    resource: str
    present: bool
    health: str
    holders: int

    def reported_healthy(self) -> bool:
        return self.present and self.health == HEALTHY

    def contribution(self, stale: set[str]) -> tuple[int, int, int]:
        return (
            int(self.present),
            int(self.reported_healthy() and self.node not in stale),
            int(self.present and self.holders > 0),
        )


@dataclass
class _Walk:
    """The state at the current point of the walk back in time."""

    totals: dict[str, list[int]]
    # node -> resource -> present devices reported Healthy (whether or not the node is stale)
    healthy_by_node: dict[str, dict[str, int]]
    stale: set[str]
    devices: dict[int, _DeviceState] = field(default_factory=dict)

    def undo_device_event(self, kind: str, device: _DeviceState, before: dict[str, Any]) -> None:
        old = device.contribution(self.stale)
        was_reported = device.reported_healthy()
        if kind == "device_added" or kind == "device_reappeared":
            device.present = False
        elif kind == "device_removed":
            device.present = True
        elif kind == "health_changed":
            device.health = str(before.get("health") or device.health)
        elif kind == "allocated":
            device.holders = max(0, device.holders - 1)
        elif kind == "released":
            device.holders += 1
        new = device.contribution(self.stale)
        row = self.totals.setdefault(device.resource, [0, 0, 0])
        for index in range(3):
            row[index] += new[index] - old[index]
        per_resource = self.healthy_by_node.setdefault(device.node, {})
        per_resource[device.resource] = (
            per_resource.get(device.resource, 0)
            + int(device.reported_healthy())
            - int(was_reported)
        )

    def set_stale(self, node: str, stale: bool) -> None:
        if (node in self.stale) == stale:
            return
        sign = -1 if stale else 1
        if stale:
            self.stale.add(node)
        else:
            self.stale.discard(node)
        for resource, count in self.healthy_by_node.get(node, {}).items():
            self.totals.setdefault(resource, [0, 0, 0])[1] += sign * count


def resource_history(
    session: Session,
    clock: Freshness,
    window: timedelta,
    *,
    points: int = DEFAULT_POINTS,
) -> dict[str, Any]:
    """{"start", "end", "times": [...], "resources": {name: {"devices": [...], ...}}}.

    Each list holds the value at each time in `times` (points + 1 of them, oldest first).
    """
    end = clock.now
    start = end - window
    times = [start + window * index / points for index in range(points + 1)]
    walk = _current_state(session, clock)
    onsets = _stale_onsets(session, clock)
    events = [
        event
        for event in _events_since(session, start)
        # The sweep's node_stale for a node stale now comes after the onset that stands in
        # for it; undoing both would wrongly clear the stale mark between them.
        if not (event[2] == "node_stale" and event[3] in onsets and event[0] >= onsets[event[3]])
    ]
    events.extend(
        (onset, 0, "node_stale", name, None, None)
        for name, onset in onsets.items()
        if onset > start
    )
    events.sort(key=lambda e: (e[0], e[1]), reverse=True)
    _load_devices(session, walk, {e[4] for e in events if e[4] is not None})
    samples: dict[str, list[list[int]]] = defaultdict(list)
    position = 0
    for moment in reversed(times):
        while position < len(events) and events[position][0] > moment:
            _undo(walk, events[position])
            position += 1
        for resource, row in walk.totals.items():
            samples[resource].append(list(row))
    resources: dict[str, dict[str, list[int]]] = {}
    for resource in sorted(samples):
        rows = samples[resource][::-1]
        # A resource that only had devices before the window still ends up here; skip it if
        # it never had any device inside the window.
        if not any(any(row) for row in rows):
            continue
        resources[resource] = {
            name: [row[index] for row in rows] for index, name in enumerate(SERIES)
        }
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "times": [t.isoformat() for t in times],
        "resources": resources,
    }


def ending_at(history: dict[str, Any], at: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    """`history` (resource_history's, possibly drawn a while ago) with its last point moved to
    the moment `at` and set to `resources` (resource_totals' items, read at that moment): the
    charts' "now" is then the same count as the totals beside them, however old the rest.
    A resource that had no device when the history was drawn starts from zero; one with no
    device now ends at zero."""
    now = {item["resource"]: item for item in resources}
    length = len(history["times"])
    ended: dict[str, dict[str, list[int]]] = {}
    for name in sorted(set(history["resources"]) | set(now)):
        drawn = history["resources"].get(name) or {series: [0] * length for series in SERIES}
        counts = now.get(name) or {}
        rows = {series: [*drawn[series][:-1], int(counts.get(series, 0))] for series in SERIES}
        if any(any(values) for values in rows.values()):
            ended[name] = rows
    return {**history, "end": at, "times": [*history["times"][:-1], at], "resources": ended}


def _current_state(session: Session, clock: Freshness) -> _Walk:
    stale = set(session.scalars(select(Node.name).where(Node.last_seen < clock.cutoff)))
    totals: dict[str, list[int]] = {}
    healthy_by_node: dict[str, dict[str, int]] = defaultdict(dict)
    held = select(Allocation.device_pk).where(Allocation.ended.is_(None)).distinct().subquery()
    rows = session.execute(
        select(
            Node.name,
            Device.resource,
            func.count(),
            func.sum(case((Device.health == HEALTHY, 1), else_=0)),
            func.count(held.c.device_pk),
        )
        .join(Node, Node.id == Device.node_id)
        .outerjoin(held, held.c.device_pk == Device.id)
        .where(Device.state == PRESENT)
        .group_by(Node.name, Device.resource)
    )
    for node, resource, present, healthy, allocated in rows:
        row = totals.setdefault(resource, [0, 0, 0])
        row[0] += int(present)
        healthy_by_node[node][resource] = int(healthy or 0)
        if node not in stale:
            row[1] += int(healthy or 0)
        row[2] += int(allocated)
    return _Walk(totals=totals, healthy_by_node=healthy_by_node, stale=stale)


# (at, id, kind, node, device_pk, before)
_EventRow = tuple[datetime, int, str, str | None, int | None, dict[str, Any] | None]


def _events_since(session: Session, start: datetime) -> list[_EventRow]:
    where = (Event.at > start, Event.kind.in_(DEVICE_KINDS + NODE_KINDS))
    rows = session.execute(
        select(Event.at, Event.id, Event.kind, Event.node, Event.device_pk).where(*where)
    ).all()
    # Only a health change needs its "before"; reading JSON for every event would cost more
    # than the rest of the walk.
    before: dict[int, dict[str, Any] | None] = dict(
        session.execute(
            select(Event.id, Event.before).where(*where, Event.kind == "health_changed")
        ).all()
    )
    return [(at, pk, kind, node, device, before.get(pk)) for at, pk, kind, node, device in rows]


def _stale_onsets(session: Session, clock: Freshness) -> dict[str, datetime]:
    """When each node stale now became stale: the moment it passed the cutoff, which is
    before the sweep noticed and wrote node_stale."""
    return {
        name: last_seen + clock.stale_after
        for name, last_seen in session.execute(
            select(Node.name, Node.last_seen).where(Node.last_seen < clock.cutoff)
        )
    }


def _load_devices(session: Session, walk: _Walk, pks: set[int]) -> None:
    """State now of the devices the events mention: by id for a few, all at once for many."""
    device_query = select(Device.id, Node.name, Device.resource, Device.state, Device.health).join(
        Node, Node.id == Device.node_id
    )
    holder_query = (
        select(Allocation.device_pk, func.count())
        .where(Allocation.ended.is_(None))
        .group_by(Allocation.device_pk)
    )
    ordered = sorted(pks)
    if len(ordered) > _BULK:
        batches = [(device_query, holder_query)]
    else:
        batches = [
            (
                device_query.where(Device.id.in_(chunk)),
                holder_query.where(Allocation.device_pk.in_(chunk)),
            )
            for chunk in (ordered[i : i + _CHUNK] for i in range(0, len(ordered), _CHUNK))
        ]
    for devices, holders_of in batches:
        holders: dict[int, int] = dict(session.execute(holders_of).all())
        for pk, node, resource, state, health in session.execute(devices):
            if pk in pks:
                walk.devices[pk] = _DeviceState(
                    node=node,
                    resource=resource,
                    present=state == PRESENT,
                    health=health,
                    holders=holders.get(pk, 0),
                )


def _undo(walk: _Walk, event: _EventRow) -> None:
    _at, _id, kind, node, device_pk, before = event
    if kind == "node_stale" and node is not None:
        walk.set_stale(node, False)
        return
    if kind == "node_seen" and node is not None:
        walk.set_stale(node, True)
        return
    if device_pk is None:
        return
    device = walk.devices.get(device_pk)
    if device is not None:
        walk.undo_device_event(kind, device, before or {})
