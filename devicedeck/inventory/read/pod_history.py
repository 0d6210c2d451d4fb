"""One pod, running or finished: every device it held, when, and how healthy each was meanwhile.

The question behind it is the one asked after a failed job: which devices did it hold, and was
any of them unhealthy while it held them. A pod is known by (namespace, name); a name reused by
a later pod (a StatefulSet's pod recreated) shows both, each hold carrying its pod UID.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select, union_all
from sqlalchemy.orm import Session

from devicedeck.clock import iso
from devicedeck.inventory.errors import NotFound
from devicedeck.inventory.fields import UNHEALTHY, UNKNOWN
from devicedeck.inventory.models import Allocation, ClaimAllocation, Device, Event, Node
from devicedeck.inventory.read.freshness import Freshness
from devicedeck.inventory.read.history import HEALTH_EVENT_KINDS
from devicedeck.inventory.read.pods import claim_summary
from devicedeck.inventory.read.queries import effective_health

HOLD_LIMIT = 500
# Health changes read for one pod; a device that flapped more often than this while held is
# shown up to the limit, and the answer says so.
EVENT_LIMIT = 5000
NODE_EVENT_KINDS = ("node_stale", "node_seen")
REMOVED = "Removed"


@dataclass(frozen=True)
class _Change:
    """One thing that moves a device's health state: its own event, or its node's."""

    id: int
    at: datetime
    device_pk: int | None
    node: str | None
    kind: str
    after: dict[str, Any]


class _HealthState:
    """A device's health as the dashboard shows it: Unknown while its node is stale, Removed
    while the plugin no longer lists it, else what it last reported."""

    def __init__(self) -> None:
        self.reported = UNKNOWN
        self.removed = False
        self.node_stale = False

    def apply(self, change: _Change) -> None:
        if change.kind == "node_stale":
            self.node_stale = True
        elif change.kind == "node_seen":
            self.node_stale = False
        elif change.kind == "device_removed":
            self.removed = True
        else:
            if change.kind in ("device_added", "device_reappeared"):
                self.removed = False
            health = change.after.get("health")
            if health:
                self.reported = str(health)

    @property
    def value(self) -> str:
        if self.removed:
            return REMOVED
        if self.node_stale:
            return UNKNOWN
        return self.reported


def health_during(
    changes: list[_Change], started: datetime, ended: datetime
) -> list[dict[str, Any]]:
    """Segments of constant health between `started` and `ended`, from the changes (in time
    order) of one device and its node."""
    state = _HealthState()
    segments: list[dict[str, Any]] = []
    begin = started
    for change in changes:
        if change.at <= started:
            state.apply(change)
            continue
        if change.at >= ended:
            break
        before = state.value
        state.apply(change)
        if state.value != before:
            segments.append({"health": before, "since": begin, "until": change.at})
            begin = change.at
    segments.append({"health": state.value, "since": begin, "until": ended})
    return [
        {"health": s["health"], "since": s["since"].isoformat(), "until": s["until"].isoformat()}
        for s in segments
    ]


def get_pod_history(
    session: Session, namespace: str, name: str, clock: Freshness
) -> dict[str, Any]:
    """The pod's containers, each device and DRA claim it holds or held (newest hold first
    within a container), and each device's health during its hold."""
    health_now = effective_health(clock)
    holds = session.execute(
        select(Allocation, Node.name, Device.numa_nodes, health_now.label("health"))
        .join(Node, Node.id == Allocation.node_id)
        .join(Device, Device.id == Allocation.device_pk)
        .where(Allocation.namespace == namespace, Allocation.pod == name)
        .order_by(
            Allocation.started.desc(), Allocation.resource, Allocation.device_id, Allocation.id
        )
        .limit(HOLD_LIMIT)
    ).all()
    claims = session.execute(
        select(ClaimAllocation, Node.name)
        .join(Node, Node.id == ClaimAllocation.node_id)
        .where(ClaimAllocation.namespace == namespace, ClaimAllocation.pod == name)
        .order_by(
            ClaimAllocation.started.desc(),
            ClaimAllocation.driver,
            ClaimAllocation.device,
            ClaimAllocation.id,
        )
        .limit(HOLD_LIMIT)
    ).all()
    if not holds and not claims:
        raise NotFound(f"no pod {namespace}/{name} has held a device")

    changes, truncated = _changes_for(session, [(row[0], row[1]) for row in holds], clock.now)
    containers: dict[str, dict[str, Any]] = defaultdict(lambda: {"devices": [], "claims": []})
    uids: list[str] = []
    nodes: list[str] = []
    spans: list[tuple[datetime, datetime | None]] = []
    for allocation, node_name, numa, device_health in holds:
        _note(uids, allocation.pod_uid)
        _note(nodes, node_name)
        spans.append((allocation.started, allocation.ended))
        relevant = [
            c for c in changes if c.device_pk == allocation.device_pk or c.node == node_name
        ]
        during = health_during(relevant, allocation.started, allocation.ended or clock.now)
        containers[allocation.container]["devices"].append(
            {
                "id": allocation.device_pk,
                "node": node_name,
                "resource": allocation.resource,
                "device_id": allocation.device_id,
                "health": device_health,
                "numa_nodes": list(numa),
                "pod_uid": allocation.pod_uid,
                "started": iso(allocation.started),
                "ended": iso(allocation.ended),
                "health_during": during,
                "unhealthy_while_held": any(s["health"] == UNHEALTHY for s in during),
            }
        )
    for claim, node_name in claims:
        _note(nodes, node_name)
        spans.append((claim.started, claim.ended))
        containers[claim.container]["claims"].append(
            {**claim_summary(claim), "ended": iso(claim.ended)}
        )
    running = any(end is None for _, end in spans)
    ends = [end for _, end in spans if end is not None]
    devices = [d for c in containers.values() for d in c["devices"]]
    return {
        "namespace": namespace,
        "name": name,
        "uid": uids[0] if uids else None,
        "uids": uids,
        "node": nodes[0],
        "nodes": nodes,
        "running": running,
        "started": iso(min(start for start, _ in spans)),
        "ended": None if running else iso(max(ends)),
        "unhealthy_while_held": any(d["unhealthy_while_held"] for d in devices),
        "history_truncated": truncated or len(holds) == HOLD_LIMIT,
        "containers": [{"name": key, **containers[key]} for key in sorted(containers)],
    }


def _note(seen: list[str], value: str | None) -> None:
    """Keeps first-seen order (newest hold first), without repeats."""
    if value and value not in seen:
        seen.append(value)


def _changes_for(
    session: Session, holds: list[tuple[Allocation, str]], now: datetime
) -> tuple[list[_Change], bool]:
    """The health events of the held devices and the stale/seen events of their nodes from
    the earliest hold's start on, plus the last of each before it (the state at the start)."""
    if not holds:
        return [], False
    device_pks = sorted({allocation.device_pk for allocation, _ in holds})
    node_names = sorted({node for _, node in holds})
    start = min(allocation.started for allocation, _ in holds)
    end = max((allocation.ended or now) for allocation, _ in holds)
    device_events = and_(Event.device_pk.in_(device_pks), Event.kind.in_(HEALTH_EVENT_KINDS))
    node_events = and_(Event.node.in_(node_names), Event.kind.in_(NODE_EVENT_KINDS))
    # One index scan per part, united by id: written as one OR, PostgreSQL walked the whole
    # change log in time order (1.4 s at 490,000 events) instead of using the indexes.
    wanted = union_all(
        select(func.max(Event.id))
        .where(device_events, Event.at <= start)
        .group_by(Event.device_pk),
        select(func.max(Event.id)).where(node_events, Event.at <= start).group_by(Event.node),
        select(Event.id).where(device_events, Event.at > start, Event.at <= end),
        select(Event.id).where(node_events, Event.at > start, Event.at <= end),
    )
    rows = session.execute(
        select(Event.id, Event.at, Event.device_pk, Event.node, Event.kind, Event.after)
        .where(Event.id.in_(wanted))
        # By time, as the changes happened; the id breaks ties in commit order.
        .order_by(Event.at, Event.id)
        .limit(EVENT_LIMIT + 1)
    ).all()
    truncated = len(rows) > EVENT_LIMIT
    changes = [
        _Change(
            id=row.id,
            at=row.at,
            device_pk=row.device_pk if row.kind not in NODE_EVENT_KINDS else None,
            node=row.node if row.kind in NODE_EVENT_KINDS else None,
            kind=row.kind,
            after=row.after or {},
        )
        for row in rows[:EVENT_LIMIT]
    ]
    return changes, truncated
