"""A device's health over a span of time, replayed from the change log: what a pod's page
shows for each device it held."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from devicedeck.inventory.fields import UNKNOWN

# Health changes read for one pod; a device that flapped more often than this while held is
# shown up to the limit, and the answer says so.
EVENT_LIMIT = 5000
NODE_EVENT_KINDS = ("node_stale", "node_seen")
REMOVED = "Removed"


@dataclass(frozen=True)
class HealthChange:
    """One thing that moves a device's health state: its own event, or its node's."""

    id: int
    at: datetime
    device_pk: int | None
    node: str | None
    kind: str
    after: dict[str, Any]


class HealthState:
    """A device's health as the dashboard shows it: Unknown while its node is stale, Removed
    while the plugin no longer lists it, else what it last reported."""

    def __init__(self) -> None:
        self.reported = UNKNOWN
        self.removed = False
        self.node_stale = False

    def apply(self, change: HealthChange) -> None:
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
    changes: list[HealthChange], started: datetime, ended: datetime
) -> list[dict[str, Any]]:
    """Segments of constant health between `started` and `ended`, from the changes (in time
    order) of one device and its node."""
    state = HealthState()
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
